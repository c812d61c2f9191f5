"""The rule-based extractor: one table per kind of card, English and Chinese, and what it skips."""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory.cards.model import ExtractedCard, SourceMessage
from memory.cards.rules import extract_by_rules
from memory.cards.supersede import ExistingCard, decide_supersede

# Wednesday 10 May 2023.
SAID = datetime(2023, 5, 10, 15, tzinfo=UTC)


def said(text: str, role: str = "user", index: int = 0) -> SourceMessage:
    return SourceMessage(role, text, SAID, index, f"client-{index}")


def only(text: str) -> ExtractedCard:
    drafts = extract_by_rules([said(text)])
    assert len(drafts) == 1, [draft.text for draft in drafts]
    return drafts[0]


# (what the user said, the card's type, its text, subject, attribute)
CARDS: list[tuple[str, str, str, str | None, str | None]] = [
    # identity
    ("My name is Ana Souza.", "profile", "User's name is Ana Souza", "user", "name"),
    ("my name is ana", "profile", "User's name is ana", "user", "name"),
    ("Hi, I'm Ana.", "profile", "User's name is Ana", "user", "name"),
    ("I am João", "profile", "User's name is João", "user", "name"),
    ("Call me Annie.", "profile", "User wants to be called Annie", "user", "preferred_name"),
    ("我叫王芳。", "profile", "用户叫王芳", "user", "name"),
    ("我叫王芳今年三十岁", "profile", "用户叫王芳", "user", "name"),
    ("我的名字叫Ana", "profile", "用户叫Ana", "user", "name"),
    ("我是李雷", "profile", "用户叫李雷", "user", "name"),
    ("大家都叫我小王", "profile", "用户希望被称为小王", "user", "preferred_name"),
    # profile
    ("I'm 34 years old.", "profile", "User is 34 years old", "user", "age"),
    ("I am 29", "profile", "User is 29 years old", "user", "age"),
    ("我今年30岁", "profile", "用户30岁", "user", "age"),
    ("I work as a data engineer", "profile", "User works as a data engineer", "user",
     "occupation"),
    ("I'm a software engineer.", "profile", "User is a software engineer", "user", "occupation"),
    ("I work at Acme Corp.", "profile", "User works at Acme Corp", "user", "employer"),
    ("我是程序员", "profile", "用户是程序员", "user", "occupation"),
    ("我是一名产品经理", "profile", "用户是一名产品经理", "user", "occupation"),
    ("我是做设计的", "profile", "用户是做设计的", "user", "occupation"),
    ("我在腾讯工作", "profile", "用户在腾讯工作", "user", "employer"),
    ("I live in Porto.", "profile", "User lives in Porto", "user", "city"),
    ("I live in New York with my wife", "profile", "User lives in New York", "user", "city"),
    ("I'm based in Berlin", "profile", "User lives in Berlin", "user", "city"),
    ("I'm from Brazil.", "profile", "User is from Brazil", "user", "hometown"),
    ("我住在上海。", "profile", "用户住在上海", "user", "city"),
    ("我来自成都", "profile", "用户来自成都", "user", "hometown"),
    ("我是北京人", "profile", "用户是北京人", "user", "hometown"),
    ("I'm allergic to peanuts", "profile", "User is allergic to peanuts", "user",
     "allergy:peanuts"),
    ("I'm vegetarian", "profile", "User is vegetarian", "user", "diet"),
    # preferences
    ("I really like green tea.", "preference", "User likes green tea", "user",
     "preference:green tea"),
    ("I don't like coffee anymore.", "preference", "User doesn't like coffee", "user",
     "preference:coffee"),
    ("I prefer tea over coffee", "preference", "User prefers tea over coffee", "user",
     "preference:tea"),
    ("I love hiking", "preference", "User loves hiking", "user", "preference:hiking"),
    ("I hate long meetings", "preference", "User hates long meetings", "user",
     "preference:long meetings"),
    ("I can't stand cilantro", "preference", "User can't stand cilantro", "user",
     "preference:cilantro"),
    ("I'm a big fan of jazz", "preference", "User likes jazz", "user", "preference:jazz"),
    ("我很喜欢喝茶。", "preference", "用户很喜欢喝茶", "user", "preference:喝茶"),
    ("我不喜欢香菜", "preference", "用户不喜欢香菜", "user", "preference:香菜"),
    ("我讨厌开会", "preference", "用户讨厌开会", "user", "preference:开会"),
    ("我更喜欢Python", "preference", "用户更喜欢Python", "user", "preference:python"),
    # what we use
    ("We use Postgres for storage.", "fact", "The team uses Postgres for storage", "team",
     "database"),
    ("We're using Django", "fact", "The team uses Django", "team", "framework"),
    ("We use Linear for tickets", "fact", "The team uses Linear for tickets", "team",
     "tool:tickets"),
    ("We use Notion", "fact", "The team uses Notion", "team", "uses:notion"),
    ("Our database is MySQL.", "fact", "The team's database is MySQL", "team", "database"),
    ("Our stack is Go and React", "fact", "The team's stack is Go and React", "team", "stack"),
    ("我们用的是PostgreSQL。", "fact", "团队使用PostgreSQL", "team", "database"),
    # a space between Chinese and Latin text is common: it must not split the verb
    ("我们用的是 Grafana 做监控。", "fact", "团队使用Grafana", "team", "uses:grafana"),
    ("我们使用钉钉", "fact", "团队使用钉钉", "team", "chat"),
    ("我们的数据库是MySQL", "fact", "团队的数据库是MySQL", "team", "database"),
    ("我们换成了阿里云", "fact", "团队改用阿里云", "team", "cloud"),
    # decisions
    ("We decided to use Redis for caching.", "fact", "Decided to use Redis for caching", "team",
     "cache"),
    ("We decided on a monthly release", "fact", "Decided on a monthly release", None, None),
    ("Let's go with FastAPI.", "fact", "Decided to go with FastAPI", "team", "framework"),
    ("我们决定用Redis做缓存", "fact", "决定用Redis做缓存", "team", "cache"),
    ("就用Vue吧", "fact", "决定用Vue", "team", "framework"),
    # tasks
    ("TODO: write the report", "task", "To do: write the report", "user", "task:writ report"),
    ("Remind me to email Carla", "task", "To do: email Carla", "user", "task:email carla"),
    ("Don't forget to water the plants", "task", "To do: water the plants", "user",
     "task:water plant"),
    ("I finished the report.", "task", "Done: the report", "user", "task:report"),
    ("I'm done with the slides", "task", "Done: the slides", "user", "task:slid"),
    ("记得给妈妈打电话。", "task", "待办：给妈妈打电话", "user", "task:给妈妈打电话"),
    ("待办：买牛奶", "task", "待办：买牛奶", "user", "task:买牛奶"),
    ("报告已经完成了。", "task", "报告已经完成了", "user", "task:报告"),
    ("我把报告写完了", "task", "用户把报告写完了", "user", "task:报告"),
]  # fmt: skip


@pytest.mark.parametrize(("said_text", "type", "text", "subject", "attribute"), CARDS)
def test_a_user_statement_gives_its_card(
    said_text: str, type: str, text: str, subject: str | None, attribute: str | None
) -> None:
    draft = only(said_text)

    assert (draft.type, draft.text, draft.subject, draft.attribute) == (
        type,
        text,
        subject,
        attribute,
    )
    assert (draft.observed_at, draft.source_indices, draft.source_ids) == (
        SAID,
        (0,),
        ("client-0",),
    )


# (what the user said, the card's text, occurred_at's day, precision)
DATED: list[tuple[str, str, date, str]] = [
    ("I moved to Lisbon last May.", "User lives in Lisbon, having moved there in May 2022",
     date(2022, 5, 1),
     "month"),
    ("We switched to Postgres last month", "The team switched to Postgres in April 2023",
     date(2023, 4, 1), "month"),
    ("Remind me to call Bob tomorrow.", "To do: call Bob on 2023-05-11", date(2023, 5, 11),
     "day"),
    ("I need to renew my passport by next Friday", "To do: renew my passport by 2023-05-12",
     date(2023, 5, 12), "day"),
    ("I went hiking with my sister yesterday.",
     "The user went hiking with the user's sister on 2023-05-09", date(2023, 5, 9), "day"),
    ("Last week we shipped the new billing page",
     "In the week of 2023-05-01 the user and others shipped the new billing page",
     date(2023, 5, 1), "week"),
    ("On 7 May 2023 I ran a marathon", "On 2023-05-07 the user ran a marathon",
     date(2023, 5, 7), "day"),
    ("我上个月搬到了深圳。", "用户2023年4月搬到了深圳", date(2023, 4, 1), "month"),
    ("提醒我明天交报告", "待办：2023年5月11日交报告", date(2023, 5, 11), "day"),
    ("上周五我去了医院看病", "2023年5月5日用户去了医院看病", date(2023, 5, 5), "day"),
    ("我们去年去了日本旅行", "用户等人2022年去了日本旅行", date(2022, 1, 1), "year"),
    ("2023年5月7日我参加了婚礼", "2023年5月7日用户参加了婚礼", date(2023, 5, 7), "day"),
]  # fmt: skip


@pytest.mark.parametrize(("said_text", "text", "day", "precision"), DATED)
def test_a_dated_statement_gets_an_absolute_date(
    said_text: str, text: str, day: date, precision: str
) -> None:
    draft = only(said_text)

    assert draft.text == text
    assert draft.occurred_at is not None
    assert (draft.occurred_at.date(), draft.precision) == (day, precision)


NOTHING = [
    "Thanks, that's great!",
    "ok",
    "I love it!",
    "call me tomorrow",
    "I'm sorry",
    "I'm a bit tired today.",
    "What did I do yesterday?",
    "Do you like tea?",
    "Where do I live",
    "I need to know why this fails",
    "I'm German",
    "We moved to the next topic",
    "你好呀",
    "谢谢！",
    "我爱你",
    "昨天天气不错吗？",
    "我们用的是什么数据库？",
    "我今天有点累",
    "我记得你说过",
    "完成了",
]


@pytest.mark.parametrize("text", NOTHING)
def test_chit_chat_and_questions_give_no_card(text: str) -> None:
    assert extract_by_rules([said(text)]) == []


def test_only_the_users_messages_make_cards() -> None:
    messages = [
        said("Your name is Ana and you live in Porto, I guess.", role="assistant", index=0),
        said("I think you prefer tea.", role="assistant", index=1),
        said("[tool output] We use MySQL", role="tool", index=2),
        said("I live in Lisbon, actually.", index=3),
    ]

    drafts = extract_by_rules(messages)

    assert [(draft.text, draft.source_indices) for draft in drafts] == [
        ("User lives in Lisbon", (3,))
    ]


def test_one_sentence_can_give_several_cards_and_the_language_is_kept() -> None:
    drafts = extract_by_rules(
        [
            said("I'm a software engineer at Acme.", index=0),
            said("我叫李雷，今年30岁。", index=0),
            said("Hi, I'm Ana and I live in Porto. I hate meetings, but I love standups.", index=0),
            said("我叫王芳，我住在北京，我喜欢爬山。", index=1),
        ]
    )

    assert [draft.text for draft in drafts] == [
        "User is a software engineer",
        "User works at Acme",
        "用户叫李雷",
        "用户30岁",
        "User's name is Ana",
        "User lives in Porto",
        "User hates meetings",
        "User loves standups",
        "用户叫王芳",
        "用户住在北京",
        "用户喜欢爬山",
    ]


def test_an_identical_card_is_kept_once_with_its_first_source() -> None:
    drafts = extract_by_rules([said("I live in Porto.", index=4), said("I live in Porto", index=9)])

    assert [(draft.text, draft.source_indices) for draft in drafts] == [
        ("User lives in Porto", (4,))
    ]


def test_an_identical_card_said_again_later_is_kept_with_its_time() -> None:
    # Lyon, Berlin, then Lyon again the next day: the second Lyon is what makes Lyon current.
    later = SAID.replace(day=11)
    drafts = extract_by_rules(
        [
            said("I live in Lyon.", index=1),
            said("I live in Berlin.", index=2),
            SourceMessage("user", "I live in Lyon.", later, 3, "client-3"),
        ]
    )

    assert [(draft.text, draft.observed_at, draft.source_indices) for draft in drafts] == [
        ("User lives in Lyon", SAID, (1,)),
        ("User lives in Berlin", SAID, (2,)),
        ("User lives in Lyon", later, (3,)),
    ]


def test_a_message_without_an_id_has_no_source_id() -> None:
    (draft,) = extract_by_rules([SourceMessage("user", "I live in Porto", SAID, 3)])

    assert (draft.source_indices, draft.source_ids) == ((3,), ())


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("I live in Porto", "I moved to Lisbon"),
        ("I like coffee", "I don't like coffee anymore"),
        ("We use MySQL", "We switched to Postgres"),
        ("Remind me to send the invoice to Bob", "I finished sending the invoice"),
        ("我住在上海", "我搬到了深圳"),
        ("提醒我明天交报告", "我把报告交了"),
        ("我们用的是MySQL", "我们决定用PostgreSQL"),
    ],
)
def test_rule_cards_carry_keys_that_supersede(before: str, after: str) -> None:
    old = only(before)
    stored = ExistingCard(1, old.subject, old.attribute, old.type, old.text)

    assert decide_supersede(only(after), [stored]).supersedes == (1,)
