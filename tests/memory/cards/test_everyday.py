"""The everyday facts that change: each phrasing gives its attribute, so the new value supersedes.

One table of statements and the card each gives (English and Chinese), what gives no card, and
pairs of an earlier and a later statement of one fact said in different words: the later card
must close the earlier one (``decide_supersede``), or the old value stays current beside it.
"""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.cards.model import ExtractedCard, SourceMessage
from memory.cards.rules import extract_by_rules
from memory.cards.supersede import ExistingCard, decide_supersede

SAID = datetime(2025, 3, 12, 9, tzinfo=UTC)


def only(text: str) -> ExtractedCard:
    drafts = extract_by_rules([SourceMessage("user", text, SAID, 0, "m0")])
    assert len(drafts) == 1, (text, [draft.text for draft in drafts])
    return drafts[0]


# (what the user said, the card's text, its attribute)
CARDS: list[tuple[str, str, str | None]] = [
    # home
    ("My home is in Bristol.", "User lives in Bristol", "city"),
    ("I moved house, my home is in Turku now.", "User lives in Turku", "city"),
    ("Big news, we moved to Poznan.", "User lives in Poznan, having moved there", "city"),
    ("I moved from Lyon to Berlin.", "User lives in Berlin, having moved there", "city"),
    ("We now live in Cork", "User lives in Cork", "city"),
    ("These days we're living in Valencia; the Porto flat is gone.", "User lives in Valencia",
     "city"),
    ("We are now living in Lille.", "User lives in Lille", "city"),
    ("我家在天津。", "用户家在天津", "city"),
    ("我们搬家了，现在家在西安。", "用户家在西安", "city"),
    ("我们已经搬去天津了。", "用户搬到了天津", "city"),
    # job
    ("I'm employed by Pine Ledger.", "User works at Pine Ledger", "employer"),
    ("I left my job; I'm with Kestrel Optics now.", "User works at Kestrel Optics", "employer"),
    ("Started at Foxglove Bio this month.",
     "User works at Foxglove Bio, having started there in March 2025", "employer"),
    ("I joined Atlas Couriers", "User works at Atlas Couriers, having started there", "employer"),
    ("Just joined Northwind Labs; my last day at Acme Foods was Friday.",
     "User works at Northwind Labs, having started there", "employer"),
    ("My new job is at Harbor Mutual.", "User works at Harbor Mutual", "employer"),
    ("I now work for Saltmarsh Energy.", "User works at Saltmarsh Energy", "employer"),
    ("我加入了华峰电子。", "用户在华峰电子工作", "employer"),
    ("我换了工作，现在在银杏网络。", "用户在银杏网络工作", "employer"),
    # phone and other things one has one of
    ("My phone is a Galaxy S22.", "User's phone is Galaxy S22", "phone"),
    ("Got a new phone, a Pixel 8.", "User's phone is Pixel 8", "phone"),
    ("I switched phones, it's a Xperia 10 now.", "User's phone is Xperia 10", "phone"),
    ("My new laptop is a ThinkPad X1.", "User's laptop is ThinkPad X1", "laptop"),
    ("Sold the Skoda Octavia; I drive a Tesla Model 3 now.", "User's car is Tesla Model 3", "car"),
    ("我的手机是华为P60。", "用户的手机是华为P60", "phone"),
    ("我换了新手机，现在是小米14。", "用户的手机是小米14", "phone"),
    # diet and sport
    ("I'm vegetarian.", "User is vegetarian", "diet"),
    ("I went fully vegan this month.", "User is vegan", "diet"),
    ("I eat fish again now, so I'm pescatarian.", "User is pescatarian", "diet"),
    ("我现在吃素。", "用户吃素食", "diet"),
    ("I go running on Saturdays.", "User's sport is running, on Saturdays", "sport"),
    ("I switched to cycling on Sundays now.", "User's sport is cycling, on Sundays", "sport"),
    ("These days I do pilates on Wednesdays.", "User's sport is pilates, on Wednesdays", "sport"),
    ("I also play tennis", "User's sport is tennis", "sport:tennis"),
    ("I gave up the pool and took up climbing instead.", "User's sport is climbing", "sport"),
    ("我现在每周去游泳。", "用户的运动是游泳", "sport"),
    # health
    ("I have a peanut allergy.", "User is allergic to peanut", "allergy:peanut"),
    ("我对花生过敏。", "用户对花生过敏", "allergy:花生"),
    # names: a user may have two dogs or brothers, so a name sets no attribute
    ("Our dog is named Bruno.", "User's dog is called Bruno", None),
    ("My brother is called Rafael.", "User's brother is called Rafael", None),
    ("My boss is called Dana Reyes.", "User's boss is called Dana Reyes", "boss name"),
    ("我家的猫叫年糕。", "用户家的猫叫年糕", None),
]  # fmt: skip


@pytest.mark.parametrize(("said", "text", "attribute"), CARDS)
def test_an_everyday_statement_gives_its_card(said: str, text: str, attribute: str | None) -> None:
    card = only(said)

    assert (card.text, card.subject, card.attribute) == (text, "user", attribute)


NOTHING = [
    "I'm with my sister now.",
    "I'm with Anna now.",  # company, not a company
    "I joined a gym.",
    "My dog is sick.",
    "My phone is a bit slow.",
    "We moved to Postgres.",  # the stack, not a home: that card is the team's
    "I drive a lot for work.",  # no model's name
    "I met Anna and she took up yoga.",  # her sport
    # A second verb is read within eight words of "I" (bounded: reading a long message stays
    # linear in its length).
    "I walked past the old pool near the station by the big park and took up climbing.",
    "I have a bad allergy.",
    "What phone do I use now?",
    "我对这个很满意",
]


@pytest.mark.parametrize("said", NOTHING)
def test_what_is_no_everyday_fact_gives_no_such_card(said: str) -> None:
    drafts = extract_by_rules([SourceMessage("user", said, SAID, 0, "m0")])
    assert all(
        draft.attribute not in {"city", "employer", "phone", "diet", "sport"}
        and not (draft.attribute or "").startswith("allergy:")
        for draft in drafts
    ), [(draft.text, draft.attribute) for draft in drafts]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("I go running on Saturdays.", "I switched to cycling on Sundays now."),
        ("I'm employed by Pine Ledger.", "I left my job; I'm with Kestrel Optics now."),
        ("I work at Pine Ledger.", "Started at Kestrel Optics this month."),
        ("My phone is a Galaxy S22.", "Got a new phone, a Pixel 8."),
        ("Got a new phone, a Pixel 8.", "I switched phones, it's a Xperia 10 now."),
        ("I'm vegetarian.", "I went fully vegan this month."),
        ("I live in Lyon.", "Big news, we moved to Berlin."),
        ("My home is in Bristol.", "I moved house, my home is in Poznan now."),
        ("We relocated to Porto in January.", "These days we're living in Valencia."),
        ("I work for Acme Foods as an analyst.", "Just joined Northwind Labs."),
        ("I drive a Skoda Octavia.", "Sold the Skoda Octavia; I drive a Tesla Model 3 now."),
        ("I go swimming on Mondays.", "I gave up the pool and took up climbing instead."),
        ("我家在武汉。", "我搬到天津了。"),
        ("我住在西安。", "我们搬家了，现在家在杭州。"),
        ("我在绿野食品工作。", "我换了工作，现在在银杏网络。"),
        ("我在长江航运工作。", "我加入了东湖出版。"),
    ],
)
def test_a_later_statement_in_other_words_supersedes_the_earlier(before: str, after: str) -> None:
    old = only(before)
    stored = ExistingCard(1, old.subject, old.attribute, old.type, old.text)

    assert decide_supersede(only(after), [stored]).supersedes == (1,)
