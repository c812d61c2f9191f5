"""Rules for the everyday facts that change: home, job, phone, diet, sport; and names of kin.

"I switched to cycling", "I'm with Kestrel Optics now", "Got a new phone, a Pixel 8" and
我搬到天津了 must set the same attribute as what they replace, or the old value stays current
beside the new one. Each rule gives the attribute of the fact (``city``, ``employer``,
``phone``, ``diet``, ``sport``), so ``decide_supersede`` closes the earlier value. Names of
pets, siblings and children set no attribute: a user may have two of each, and a second name
replaces nothing. The English rules run after ``memory.cards.english`` and the Chinese ones
after ``memory.cards.chinese`` (the first rule to read a stretch of a sentence owns it).
"""

from __future__ import annotations

import re

from memory.cards.english import END, I_AM, PLACE, VALUE, capitalized_words, clean_value
from memory.cards.phrasing import category_of
from memory.cards.rulebook import Finding, Rule, rule

__all__ = ["EVERYDAY_CHINESE", "EVERYDAY_ENGLISH"]

EVERYDAY_ENGLISH: list[Rule] = []
EVERYDAY_CHINESE: list[Rule] = []

#: An organisation's name: capitalized words, digits and "&" (cut at the first other word).
ORG = r"(?P<v>[A-Z0-9][\w'&.-]*(?:\s+(?:&\s+)?[A-Z0-9][\w'&.-]*){0,4})"
# Words that end a single-word organisation's name: "Acme Labs", not "Acme".
_ORG_SUFFIX = re.compile(
    r"\b(?:inc|ltd|llc|gmbh|plc|co|corp|labs?|bank|group|media|bio|energy|systems|studios?|"
    r"partners|mutual|optics|couriers|ledger|foods?|health|capital|tech|software|games)\.?$",
    re.IGNORECASE,
)


def _works_at(where: str, *, started: bool = False) -> Finding | None:
    org = capitalized_words(where)
    if org is None or category_of(org) is not None:
        return None
    text = f"User works at {org}, having started there" if started else f"User works at {org}"
    return Finding("profile", text, "work", attribute="employer", dated_by_sentence=started)


@rule(EVERYDAY_ENGLISH, rf"{I_AM}\s+(?:now\s+)?employed\s+(?:by|at)\s+{ORG}")
def _employed_by(match: re.Match[str]) -> Finding | None:
    return _works_at(match["v"])


@rule(EVERYDAY_ENGLISH, rf"{I_AM}\s+(?:now\s+)?with\s+{ORG}")
def _with_org(match: re.Match[str]) -> Finding | None:
    # "I'm with Anna" is company, not a job: only a name that reads as an organisation's, said
    # as the present state ("now").
    org = capitalized_words(match["v"]) or ""
    present = _PRESENT.search(match.string)
    if present is None or not (len(org.split()) >= 2 or _ORG_SUFFIX.search(org)):
        return None
    return _works_at(org)


_PRESENT = re.compile(r"\b(?:now|these days|currently)\b", re.IGNORECASE)


@rule(
    EVERYDAY_ENGLISH,
    r"(?:^\W*|\bi(?:'ve| have)?\s+(?:just\s+|recently\s+)?)(?:started|began)\s+"
    rf"(?:a\s+new\s+job\s+|my\s+new\s+job\s+|working\s+|work\s+)?(?:at|with|for)\s+{ORG}",
)
def _started_at(match: re.Match[str]) -> Finding | None:
    return _works_at(match["v"], started=True)


@rule(
    EVERYDAY_ENGLISH,
    # "I've just joined X", and without the subject at a sentence's start: "Just joined X".
    r"(?:^\W*|\bi(?:'ve| have)?\s+)(?:just\s+|recently\s+)?(?:joined|"
    rf"(?:got|landed|taken|took|accepted)\s+an?\s+(?:new\s+)?(?:job|position|role)\s+(?:at|with))\s+{ORG}",
)
def _joined(match: re.Match[str]) -> Finding | None:
    return _works_at(match["v"], started=True)


@rule(
    EVERYDAY_ENGLISH,
    rf"\bmy\s+(?:new\s+)?(?:job|employer|company|workplace)\s+is\s+(?:now\s+)?(?:at\s+|with\s+)?{ORG}",
)
def _my_job_is(match: re.Match[str]) -> Finding | None:
    return _works_at(match["v"])


@rule(EVERYDAY_ENGLISH, rf"\bi\s+(?:now|currently)\s+work\s+(?:at|for)\s+{ORG}")
def _now_work_at(match: re.Match[str]) -> Finding | None:
    return _works_at(match["v"])


@rule(
    EVERYDAY_ENGLISH,
    r"\b(?:my|our)\s+(?:new\s+)?(?:home|house|flat|apartment|place)\s+is\s+(?:now\s+)?"
    rf"(?:in|based in)\s+{PLACE}",
)
def _home_is_in(match: re.Match[str]) -> Finding | None:
    return _city(match["v"], "User lives in {where}")


@rule(
    EVERYDAY_ENGLISH,
    r"\bwe(?:'ve| have)?\s+(?:just\s+|recently\s+|finally\s+|already\s+)?(?:moved|relocated)"
    rf"(?:\s+back)?(?:\s+house)?(?:\s+from\s+[^,.;!?]+?)?\s+to\s+{PLACE}",
)
def _we_moved_to(match: re.Match[str]) -> Finding | None:
    return _city(match["v"], "User lives in {where}, having moved there", dated=True)


@rule(
    EVERYDAY_ENGLISH,
    r"\bwe(?:(?:'re|\u2019re|\s+are)\s+(?:now\s+|currently\s+)?living|"
    rf"(?:\s+now|\s+currently)?\s+live)\s+in\s+{PLACE}",
)
def _we_live_in(match: re.Match[str]) -> Finding | None:
    return _city(match["v"], "User lives in {where}")


def _city(value: str, text: str, *, dated: bool = False) -> Finding | None:
    where = capitalized_words(value)
    if where is None or category_of(where) is not None:  # "we moved to Postgres"
        return None
    return Finding(
        "profile", text.format(where=where), "location", attribute="city", dated_by_sentence=dated
    )


# --- devices --------------------------------------------------------------------------------

_DEVICES = {
    "phone": "phone", "smartphone": "phone", "mobile": "phone", "cell phone": "phone",
    "laptop": "laptop", "computer": "computer", "tablet": "tablet", "car": "car",
    "bike": "bike", "watch": "watch", "smartwatch": "watch", "e-reader": "e-reader",
}  # fmt: skip
DEVICE = (
    r"(?P<what>cell phone|smartphone|phone|mobile|laptop|computer|tablet|car|bike|smartwatch|"
    r"watch|e-reader)"
)


def _device(what: str, value: str) -> Finding | None:
    model = clean_value(value)
    # A model's name has a capital or a digit ("Pixel 8", "iPhone 13"): "a bit slow" is none.
    if not model or not re.search(r"[A-Z0-9]", model.split()[0]):
        return None
    kind = _DEVICES[what.lower()]
    return Finding("profile", f"User's {kind} is {model}", "device", attribute=kind)


@rule(
    EVERYDAY_ENGLISH,
    rf"\b(?:my|our)\s+(?:new\s+|current\s+)?{DEVICE}\s+(?:is|'s)\s+(?:now\s+)?(?:an?\s+|the\s+)?{VALUE}{END}",
)
def _my_device_is(match: re.Match[str]) -> Finding | None:
    return _device(match["what"], match["v"])


@rule(
    EVERYDAY_ENGLISH,
    r"\b(?:got|bought|have|picked up|getting)\s+(?:myself\s+)?an?\s+new\s+"
    rf"{DEVICE}\s*[,:;\u2013\u2014-]\s*(?:it's\s+|it is\s+)?(?:an?\s+|the\s+)?{VALUE}{END}",
)
def _new_device(match: re.Match[str]) -> Finding | None:
    return _device(match["what"], match["v"])


@rule(EVERYDAY_ENGLISH, rf"\bi\s+(?:now\s+|currently\s+)?drive\s+(?:an?\s+|the\s+)?{VALUE}{END}")
def _i_drive(match: re.Match[str]) -> Finding | None:
    # "I drive a Skoda Octavia" (a model's name: "I drive a lot" is none).
    return _device("car", match["v"])


@rule(
    EVERYDAY_ENGLISH,
    rf"\b(?:switched|changed|upgraded)\s+{DEVICE}s?\s*[,:;\u2013\u2014-]?\s*(?:now\s+)?"
    rf"(?:it's|it is|to|i have|i've got)\s+(?:now\s+)?(?:an?\s+|the\s+)?{VALUE}{END}",
)
def _switched_device(match: re.Match[str]) -> Finding | None:
    return _device(match["what"], match["v"])


# --- diet and sport -------------------------------------------------------------------------

SPORTS = (
    r"trail running|table tennis|ping pong|martial arts|rock climbing|weightlifting|"
    r"running|jogging|cycling|biking|swimming|yoga|pilates|climbing|bouldering|tennis|"
    r"football|soccer|basketball|volleyball|badminton|squash|rowing|boxing|kickboxing|hiking|"
    r"skiing|snowboarding|surfing|golf|crossfit|dancing|karate|judo|taekwondo|skating|"
    r"spinning|cricket|rugby|baseball|hockey|fencing|archery|triathlons?|marathons?"
)


@rule(
    EVERYDAY_ENGLISH,
    # "I took up climbing", and its second verb: "I gave up the pool and took up climbing",
    # within eight words (an unbounded look for "and" read a long message in quadratic time).
    r"\bi(?:'ve| have)?\s+(?:(?:[^\s.;!?]+\s+){1,8}?and\s+(?:then\s+)?)?"
    r"(?:(?:now|also|still|usually|mostly|regularly|just|recently|"
    r"mainly)\s+)*(?:go|do|play|practi[cs]e|took up|take up|taken up|started|switched to|"
    r"changed to|moved on to|got into|picked up)\s+(?:(?:some|a bit of|a little)\s+)?"
    rf"(?P<v>{SPORTS})\b(?:\s+(?P<when>(?:on|every)\s+[^,.;!?\s]+"
    r"(?:\s+(?:mornings?|afternoons?|evenings?|nights?))?))?",
)
def _sport(match: re.Match[str]) -> Finding | None:
    sport = match["v"].lower()
    when = match["when"] or ""
    text = f"User's sport is {sport}" + (f", {when}" if when else "")
    # "I also play tennis" adds a sport; otherwise a new sport replaces the regular one.
    also = re.search(r"\b(?:also|too|as well)\b", match.string, re.IGNORECASE)
    attribute = f"sport:{sport}" if also else "sport"
    return Finding("profile", text, "sport", attribute=attribute)


@rule(EVERYDAY_ENGLISH, rf"\bi\s+have\s+an?\s+(?P<v>[\w -]+?)\s+allergy{END}")
def _allergy(match: re.Match[str]) -> Finding | None:
    what = match["v"].strip().lower()
    if what in ("bad", "severe", "mild", "new", "slight", "terrible"):
        return None
    return Finding("profile", f"User is allergic to {what}", "health", attribute=f"allergy:{what}")


# --- names of kin and pets ------------------------------------------------------------------

_ONE_OF = {"wife", "husband", "partner", "boyfriend", "girlfriend", "fiance", "fiancee", "boss",
           "manager", "mother", "mom", "mum", "father", "dad"}  # fmt: skip
KIN = (
    r"(?P<who>dog|cat|puppy|kitten|rabbit|bunny|parrot|hamster|horse|brother|sister|son|"
    r"daughter|wife|husband|partner|boyfriend|girlfriend|fiance|fiancee|boss|manager|mother|"
    r"mom|mum|father|dad|best friend)"
)
KIN_NAME = r"(?P<name>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)?)"


@rule(
    EVERYDAY_ENGLISH,
    rf"\b(?:my|our)\s+{KIN}(?:'s\s+name\s+is|\s+is\s+(?:named|called)|\s+is)\s+{KIN_NAME}{END}",
)
def _kin_name(match: re.Match[str]) -> Finding | None:
    return _named(match["who"].lower(), match["name"])


@rule(
    EVERYDAY_ENGLISH,
    rf"\b(?:we|i)(?:'ve| have)?\s+(?:have|got|adopted)\s+an?\s+(?:new\s+)?{KIN}\s+"
    rf"(?:named|called)\s+{KIN_NAME}{END}",
)
def _has_kin_named(match: re.Match[str]) -> Finding | None:
    return _named(match["who"].lower(), match["name"])


def _named(who: str, said: str) -> Finding | None:
    name = capitalized_words(said)
    if name is None:  # "my dog is sick"
        return None
    # A user has one boss, but may have two dogs or brothers: a second name replaces nothing.
    attribute = f"{who} name" if who in _ONE_OF else None
    return Finding("profile", f"User's {who} is called {name}", "people", attribute=attribute)


# --- Chinese --------------------------------------------------------------------------------

#: A Chinese value: everything up to the next punctuation mark or space.
ZH_VALUE = r"\s*(?P<v>[^\uff0c\u3002\uff01\uff1f\uff1b\u3001\uff1a,.!?;:\s]+)"
_ZH_STOPS = ("现在", "目前", "已经", "因为", "所以", "但是", "不过", "然后", "工作", "上班",
             "了", "呢", "啊", "吧", "哦", "呀", "的时候")  # fmt: skip
_ZH_PARTICLES = "了呢啊吧哦呀啦嘛的"


def _zh_cut(value: str) -> str:
    end = len(value)
    for stop in _ZH_STOPS:
        at = value.find(stop, 1)
        if at != -1:
            end = min(end, at)
    return value[:end].rstrip(_ZH_PARTICLES)


@rule(EVERYDAY_CHINESE, rf"(?:我们?的?|^|[\uff0c,])(?:现在|目前)?家(?:现在|目前)?在{ZH_VALUE}")
def _zh_home(match: re.Match[str]) -> Finding | None:
    where = _zh_cut(match["v"])
    return Finding("profile", f"用户家在{where}", "location", attribute="city") if where else None


@rule(
    EVERYDAY_CHINESE,
    rf"我(?:现在|目前|已经|刚)?(?:加入了|加入|入职了|入职|跳槽到了|跳槽到|跳槽去了){ZH_VALUE}",
)
def _zh_joined(match: re.Match[str]) -> Finding | None:
    return _zh_employer(match["v"])


@rule(
    EVERYDAY_CHINESE,
    rf"换了?(?:新)?(?:工作|公司)[\uff0c,]?\s*(?:现在|目前)?(?:在|去了|到了){ZH_VALUE}",
)
def _zh_new_job(match: re.Match[str]) -> Finding | None:
    return _zh_employer(match["v"])


def _zh_employer(value: str) -> Finding | None:
    where = _zh_cut(value)
    if len(where) < 2:
        return None
    return Finding("profile", f"用户在{where}工作", "work", attribute="employer")


@rule(
    EVERYDAY_CHINESE,
    rf"(?:我|我们)(?:家|养)?的?(?P<who>猫咪|小猫|猫|狗狗|小狗|狗|兔子)(?:的名字)?叫{ZH_VALUE}",
)
def _zh_pet(match: re.Match[str]) -> Finding | None:
    name = _zh_cut(match["v"])
    if not name or len(name) > 6:
        return None
    return Finding("profile", f"用户家的{match['who']}叫{name}", "people")


@rule(
    EVERYDAY_CHINESE,
    r"(?:我的?(?:新)?手机(?:现在)?(?:是|用的是)|换了?(?:新)?手机[\uff0c,]?\s*(?:现在)?(?:是|用的是)?)"
    rf"{ZH_VALUE}",
)
def _zh_phone(match: re.Match[str]) -> Finding | None:
    model = _zh_cut(match["v"])
    if not model:
        return None
    return Finding("profile", f"用户的手机是{model}", "device", attribute="phone")


ZH_SPORTS = (
    r"跑步|慢跑|游泳|骑车|骑行|瑜伽|普拉提|爬山|登山|徒步|打篮球|踢足球|打羽毛球|打网球|"
    r"打乒乓球|健身|攀岩|滑雪|跳舞|拳击"
)


@rule(
    EVERYDAY_CHINESE,
    r"我(?:现在|最近|每周|平时|周末|开始|已经|改成了|改成|换成了|换成|改为)*(?:去|在|练)?"
    rf"(?P<v>{ZH_SPORTS})",
)
def _zh_sport(match: re.Match[str]) -> Finding | None:
    return Finding("profile", f"用户的运动是{match['v']}", "sport", attribute="sport")


@rule(EVERYDAY_CHINESE, rf"我(?:现在|一直|有点)?对{ZH_VALUE}")
def _zh_allergy(match: re.Match[str]) -> Finding | None:
    said = match["v"]
    if "过敏" not in said[1:]:
        return None
    what = said[: said.index("过敏", 1)]
    return Finding("profile", f"用户对{what}过敏", "health", attribute=f"allergy:{what}")


@rule(EVERYDAY_CHINESE, r"我(?:现在|已经|开始|改成)?(?P<v>吃纯素|吃素|是纯素食者|是素食者|吃全素)")
def _zh_diet(match: re.Match[str]) -> Finding | None:
    diet = "纯素" if "纯" in match["v"] or "全" in match["v"] else "素食"
    return Finding("profile", f"用户吃{diet}", "health", attribute="diet")
