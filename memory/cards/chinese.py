"""The Chinese extraction rules: identity, profile, preferences, stack, decisions, tasks.

Each rule reads one sentence of the user's and words a card about 用户 in Chinese (never
translated, names kept as written). Chinese has no spaces, so a value runs to the next
punctuation mark and is then cut at the first word that starts another phrase (``我叫王芳今年
三十岁`` gives the name 王芳).
"""

from __future__ import annotations

import re

from memory.cards.model import normalize_text
from memory.cards.phrasing import category_of
from memory.cards.rulebook import Finding, Rule, rule
from memory.cards.supersede import task_attribute

__all__ = ["CHINESE_RULES"]

CHINESE_RULES: list[Rule] = []

#: A value: everything up to the next punctuation mark (ASCII or full-width) or space.
VALUE = r"\s*(?P<v>[^\uff0c\u3002\uff01\uff1f\uff1b\u3001\uff1a,.!?;:\s]+)"
# Words that start a new phrase after a value; the value is cut before the first of them.
_STOPS = (
    "今年", "现在", "目前", "已经", "因为", "所以", "但是", "不过", "而且", "并且", "然后",
    "我们", "我", "你", "在", "住", "来自", "工作", "上班", "了", "呢", "啊", "吧", "哦",
    "呀", "的时候",
)  # fmt: skip
_PARTICLES = "了呢啊吧哦呀啦嘛的"
_SURNAMES = set(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛"
    "郝龚邵万钱严覃武戴莫孔向汤欧司上诸"
)
_JOBS = (
    "工程师", "程序员", "设计师", "产品经理", "经理", "老师", "教师", "学生", "医生", "护士",
    "律师", "会计", "司机", "记者", "作家", "研究员", "教授", "总监", "主管", "老板", "创始人",
    "厨师", "销售", "分析师", "架构师", "实习生", "公务员", "警察", "师", "员", "家",
)  # fmt: skip
_PRONOUNS = ("你", "他", "她", "它", "这个", "那个", "这", "那", "他们", "你们")


def _cut(value: str, stops: tuple[str, ...] = _STOPS) -> str:
    """``value`` up to the first stop word (not at its very start), particles stripped."""
    end = len(value)
    for stop in stops:
        at = value.find(stop, 1)
        if at != -1:
            end = min(end, at)
    return value[:end].rstrip(_PARTICLES)


def _is_name(value: str) -> bool:
    if re.fullmatch(r"[A-Z][\w'-]*(?: [A-Z][\w'-]*)?", value):
        return True
    return (
        2 <= len(value) <= 4
        and value[0] in _SURNAMES
        and re.fullmatch(r"[\u4e00-\u9fff]+", value) is not None
    )


@rule(CHINESE_RULES, rf"我(?:的名字)?叫{VALUE}")
def _name(match: re.Match[str]) -> Finding | None:
    name = _cut(match["v"], ("是", *_STOPS))
    if not name or (len(name) > 6 and not name.isascii()):
        return None
    return Finding("profile", f"用户叫{name}", "identity", attribute="name")


@rule(CHINESE_RULES, rf"(?:可以|大家都|你就|请)叫我{VALUE}")
def _call_me(match: re.Match[str]) -> Finding | None:
    name = _cut(match["v"])
    if not name or len(name) > 6:
        return None
    return Finding("profile", f"用户希望被称为{name}", "identity", attribute="preferred_name")


@rule(CHINESE_RULES, rf"我是{VALUE}")
def _i_am(match: re.Match[str]) -> Finding | None:
    said = match["v"]
    if said.startswith("做") and "的" in said:  # 我是做设计的: what the user does for a living
        return Finding(
            "profile", f"用户是{said[: said.index('的') + 1]}", "work", attribute="occupation"
        )
    what = _cut(said, ("在", "了", "呢", "啊", "吧", "今年", "现在", "住", "来自"))
    if what.endswith("人") and 2 <= len(what) <= 5:  # 北京人: where the user is from
        return Finding("profile", f"用户是{what}", "location", attribute="hometown")
    if what.endswith(_JOBS) and len(what) <= 10:
        return Finding("profile", f"用户是{what}", "work", attribute="occupation")
    if _is_name(what):
        return Finding("profile", f"用户叫{what}", "identity", attribute="name")
    return None


@rule(
    CHINESE_RULES, r"(?:我|^|[\uff0c,])(?:今年|已经)?(?P<v>\d{1,3}|[一二三四五六七八九十]{1,3})岁"
)
def _age(match: re.Match[str]) -> Finding | None:
    return Finding("profile", f"用户{match['v']}岁", "profile", attribute="age")


@rule(
    CHINESE_RULES, r"我(?:现在|目前)?在(?P<v>[^\uff0c\u3002\uff01\uff1f,.!?\s]{1,20}?)(?:工作|上班)"
)
def _employer(match: re.Match[str]) -> Finding | None:
    return Finding("profile", f"用户在{match['v']}工作", "work", attribute="employer")


@rule(CHINESE_RULES, rf"我(?:现在|目前)?住在{VALUE}")
def _lives_in(match: re.Match[str]) -> Finding | None:
    where = _cut(match["v"])
    return Finding("profile", f"用户住在{where}", "location", attribute="city") if where else None


@rule(CHINESE_RULES, rf"我(?:[^\uff0c\u3002搬]{{0,6}}?)搬(?:到|去|家到)了?{VALUE}")
def _moved_to(match: re.Match[str]) -> Finding | None:
    where = _cut(match["v"])
    if not where:
        return None
    return Finding(
        "profile", f"用户搬到了{where}", "location", attribute="city", dated_by_sentence=True
    )


@rule(CHINESE_RULES, rf"我来自{VALUE}")
def _from(match: re.Match[str]) -> Finding | None:
    where = _cut(match["v"])
    return (
        Finding("profile", f"用户来自{where}", "location", attribute="hometown") if where else None
    )


@rule(
    CHINESE_RULES,
    r"我(?P<adv>很|非常|特别|最|比较|挺|真的|一直)?"
    rf"(?P<verb>不太喜欢|不喜欢|更喜欢|喜欢|讨厌|爱吃|爱喝|偏好|受不了|不吃|不喝){VALUE}",
)
def _preference(match: re.Match[str]) -> Finding | None:
    what = _cut(match["v"], ("因为", "所以", "但是", "不过", "了", "呢", "啊", "吧"))
    if not what or what.startswith(_PRONOUNS):
        return None
    text = f"用户{match['adv'] or ''}{match['verb']}{what}"
    attribute = "preference:" + normalize_text(what)
    return Finding("preference", text, "preference", attribute=attribute)


def _tool(thing: str) -> str:
    return category_of(thing) or "uses:" + normalize_text(thing)


@rule(CHINESE_RULES, rf"我们(?:现在|目前|一直)?(?:用的是|使用的是|在用|用|使用|采用){VALUE}")
def _we_use(match: re.Match[str]) -> Finding | None:
    thing = _cut(match["v"], ("来", "做", "作为", "了", "呢", "吧"))
    if not thing or thing.startswith(_PRONOUNS):
        return None
    return Finding("fact", f"团队使用{thing}", "stack", subject="team", attribute=_tool(thing))


_OUR = {"数据库": "database", "技术栈": "stack", "后端": "backend", "前端": "frontend",
        "语言": "language", "框架": "framework", "云": "cloud", "缓存": "cache"}  # fmt: skip


@rule(CHINESE_RULES, rf"我们的(?P<what>数据库|技术栈|后端|前端|语言|框架|云|缓存)是{VALUE}")
def _our_x_is(match: re.Match[str]) -> Finding | None:
    text = f"团队的{match['what']}是{_cut(match['v'])}"
    return Finding("fact", text, "stack", subject="team", attribute=_OUR[match["what"]])


@rule(CHINESE_RULES, rf"我们(?:已经)?(?:换成了|换成|改用了|改用|迁移到了|迁移到|换到了){VALUE}")
def _switched(match: re.Match[str]) -> Finding | None:
    thing = _cut(match["v"])
    return Finding("fact", f"团队改用{thing}", "stack", subject="team", attribute=_tool(thing))


@rule(CHINESE_RULES, rf"决定(?:了)?{VALUE}")
def _decided(match: re.Match[str]) -> Finding | None:
    what = match["v"].rstrip(_PARTICLES)
    if len(what) < 2:
        return None
    category = category_of(what)
    return Finding("fact", f"决定{what}", "decision", "team" if category else None, category)


@rule(CHINESE_RULES, rf"就用{VALUE}吧")
def _lets_use(match: re.Match[str]) -> Finding | None:
    what = match["v"]
    category = category_of(what)
    return Finding("fact", f"决定用{what}", "decision", "team" if category else None, category)


@rule(
    CHINESE_RULES,
    r"(?:提醒我|(?<![我还不])记得|别忘了|不要忘记|待办事项|待办|我需要)[\uff1a:]?"
    r"(?P<v>[^\u3002\uff01\uff1f\uff1b.!?;\n]+)",
)
def _todo(match: re.Match[str]) -> Finding | None:
    what = match["v"].strip().rstrip(_PARTICLES)
    if len(what) < 2:
        return None
    return Finding("task", f"待办\uff1a{what}", "task", attribute=task_attribute(what))


@rule(
    CHINESE_RULES,
    r"(?P<v>[^\uff0c\u3002\uff01\uff1f\uff1b,.!?;\n]*?)(?:已经)?(?:完成了|做完了|写完了|弄完了|搞定了|交了)"
    r"(?P<w>[^\uff0c\u3002\uff01\uff1f\uff1b,.!?;\n]*)",
)
def _done(match: re.Match[str]) -> Finding | None:
    clause = match[0].strip()
    if len(task_attribute(clause)) <= len("task:"):
        return None  # "完成了" alone names no task
    # "我把报告写完了" reads as the user's deed; "报告完成了" is neutral already.
    text = clause.replace("我们", "用户等人").replace("我", "用户")
    return Finding("task", text, "task", attribute=task_attribute(clause))
