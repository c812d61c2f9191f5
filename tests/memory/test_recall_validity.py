"""The current fact wins in recall: stale memories marked with their validity, ranked after it.

Through ``Memory`` on the real Postgres with the hashing embedder: facts said in dated sessions,
then asked in a new session; the prompt ``prepare`` builds is read as the model would read it.
A stale excerpt ("User: I live in Lyon") must be marked "[until ...]" and come after the
current card; a question about the past gets the earlier value with its validity. The new
user's sessions of issue 18 are replayed with a chat model that answers in prose (the rules
take over), in English and in Chinese.
"""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply

from memory import Memory, Settings
from memory.cards.asking import asks_about_now, asks_about_the_past, attributes_asked
from memory.cards.supersede import ChainLink, chain_problems
from memory.context.parts import MEMORIES_HEADER
from memory.llm import OpenAIChatModel
from memory.longterm.long_term_memory import default_embedder
from retrieval import MINILM_NAME, CardIndex, HashingEmbedder
from storage import Card, CardFilter, CardStore, Database

T0 = datetime(2025, 3, 3, 9, tzinfo=UTC)
FILLER = [
    ("How do I descale a kettle?", "Vinegar and water work well."),
    ("Suggest a board game for four people.", "Try Ticket to Ride."),
]


@pytest.fixture(scope="module")
def validity_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def make_memory(validity_database: Database) -> Callable[..., Memory]:
    def make(base_url: str | None = None) -> Memory:
        chat = OpenAIChatModel(base_url=base_url, api_key="test") if base_url else None
        settings = Settings(summary={"mode": "inline", "debounce_seconds": 0, "retries": 1})
        return Memory(
            validity_database, settings, chat=chat, embedder=HashingEmbedder(name=MINILM_NAME)
        )

    return make


def session(mem: Memory, user_id: str, number: int, day: int, said: list[str]) -> None:
    """A dated session: each statement among small talk, a minute apart; then it ends."""
    pairs = [
        *FILLER[:1],
        *((text, "Got it, I will keep that in mind.") for text in said),
        *FILLER[1:],
    ]
    start = T0 + timedelta(days=day)
    messages = [
        {"role": role, "content": content, "timestamp": start + timedelta(minutes=2 * i + j)}
        for i, pair in enumerate(pairs)
        for j, (role, content) in enumerate(zip(("user", "assistant"), pair, strict=True))
    ]
    mem.record(user_id=user_id, session_id=f"s{number}", messages=messages)
    mem.end_session(user_id=user_id, session_id=f"s{number}")


def memories(mem: Memory, user_id: str, question: str, day: int) -> list[str]:
    """The memories of the prompt built for ``question`` in a new session, in prompt order."""
    context = mem.prepare(
        user_id=user_id,
        session_id=f"ask-{abs(hash(question))}",
        input={"role": "user", "content": question, "timestamp": T0 + timedelta(days=day)},
    )
    for message in context.messages:
        if message["role"] == "system" and str(message["content"]).startswith(MEMORIES_HEADER):
            return [json.loads(line[2:]) for line in str(message["content"]).splitlines()[1:]]
    return []


def first(lines: list[str], value: str) -> int:
    return next(i for i, line in enumerate(lines) if value in line)


def assert_current_first(lines: list[str], current: str, stale: str) -> None:
    """``current`` is in the memories, before every memory holding ``stale``, each of which is
    marked with the end of its validity."""
    assert any(current in line for line in lines), lines
    at = first(lines, current)
    for position, line in enumerate(lines):
        if stale in line:
            assert position > at, lines
            assert "until " in line, line


def chains(validity_database: Database, user_id: str) -> list[ChainLink]:
    store = CardStore(validity_database, model=MINILM_NAME, dimension=384)
    return [
        ChainLink(c.id, c.subject, c.attribute, c.superseded_by, c.pinned)
        for c in store.list_cards(user_id, CardFilter(include_superseded=True))
    ]


# --- the scenario, offline ------------------------------------------------------------


def test_where_do_i_live_now_recalls_the_current_city_first_and_marks_the_old_one(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    session(mem, user_id, 1, 0, ["I live in Lyon."])
    session(mem, user_id, 2, 30, ["I moved to Berlin."])

    lines = memories(mem, user_id, "Where do I live now?", 60)

    assert "User lives in Berlin" in lines[0], lines
    assert_current_first(lines, "Berlin", "Lyon")


def test_a_stale_excerpt_is_marked_with_its_validity_and_ranked_after_the_current_card(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    session(mem, user_id, 1, 0, ["My home is in Lyon."])
    session(mem, user_id, 2, 30, ["I moved house, my home is in Berlin now."])

    # "home" is in both statements' excerpts, and in no card text: search finds the excerpts.
    lines = memories(mem, user_id, "Tell me about my home.", 60)

    stale = [line for line in lines if "My home is in Lyon" in line]
    assert stale, lines
    assert stale[0].startswith("[until 2 April 2025] [3 March 2025]"), stale
    assert_current_first(lines, "Berlin", "Lyon")


def test_the_prompt_keeps_recalls_order_the_named_current_card_first_whatever_its_score(
    validity_database: Database, user_id: str
) -> None:
    # The first statement gives no card (no rule reads it), only its excerpt; MiniLM finds
    # it closer to the question than the current card, which comes first all the same.
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0, "retries": 1})
    mem = Memory(validity_database, settings, embedder=default_embedder(settings.cards))
    session(mem, user_id, 1, 0, ["My weekly exercise is swimming laps at the city pool."])
    session(mem, user_id, 2, 30, ["I gave up the pool and took up rowing instead."])
    question = "What exercise am I into lately?"

    lines = memories(mem, user_id, question, 60)
    context = mem.prepare(
        user_id=user_id,
        session_id="ask-again",
        input={"role": "user", "content": question, "timestamp": T0 + timedelta(days=60)},
    )

    assert context.report.recall is not None
    named, *others = context.report.recall.cards
    assert named.reason.endswith("the current value of a property the question names")
    assert any(other.score > named.score for other in others)  # what the old order sorted by
    assert "User's sport is rowing" in lines[0], lines
    assert first(lines, "rowing") < first(lines, "swimming")


@pytest.mark.parametrize(
    ("first_said", "stale"),
    [
        # No rule reads it: its excerpt is below the gate, a preference read from it above.
        ("My flat in Lyon is tiny but I love the neighbourhood.", "neighbourhood"),
        # A rule reads it: the city card, which the question names.
        ("I live in Lyon.", "User lives in Lyon"),
    ],
)
def test_a_change_no_rule_reads_is_brought_in_and_sent_first_for_a_question_about_now(
    validity_database: Database, user_id: str, first_said: str, stale: str
) -> None:
    # MiniLM puts the change, which shares no word with the question, below the relevance
    # gate; no rule reads it: only what the first statement said was recalled.
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0, "retries": 1})
    mem = Memory(validity_database, settings, embedder=default_embedder(settings.cards))
    session(mem, user_id, 1, 0, [first_said])
    session(mem, user_id, 2, 30, ["Finally settled in Bordeaux after leaving Lyon."])

    now = memories(mem, user_id, "Which city do I live in?", 60)
    before = memories(mem, user_id, "Which city did I live in before Bordeaux?", 60)

    assert "Bordeaux" in now[0], now
    assert any(stale in line for line in now[1:]), now
    assert any("Lyon" in line for line in before), before


def test_a_question_about_the_past_gets_the_history_it_asks_for_not_another_facts(
    validity_database: Database, user_id: str
) -> None:
    # Rules read the car and its change, not the move: the old car is the user's only
    # superseded card, and came on top of k for a question about the old city.
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0, "retries": 1})
    mem = Memory(validity_database, settings, embedder=default_embedder(settings.cards))
    session(mem, user_id, 1, 0, ["Home for me is Oslo.", "I drive a Fiat 500."])
    session(mem, user_id, 2, 30, ["We finally moved, we're in Bergen now."])
    session(mem, user_id, 3, 45, ["Got a new car, a Mini Cooper."])

    city = memories(mem, user_id, "Which city did I live in before Bergen?", 60)
    car = memories(mem, user_id, "What did I drive before the Mini Cooper?", 60)

    assert not any("Fiat" in line for line in city), city
    assert any("Fiat 500" in line and "until " in line for line in car), car


def test_the_keyed_cards_are_read_ahead_beside_the_request_and_mark_the_same(
    make_memory: Callable[..., Memory], user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_memory()
    session(mem, user_id, 1, 0, ["My home is in Lyon."])
    session(mem, user_id, 2, 30, ["I moved house, my home is in Berlin now."])
    looked_up = CardIndex.keyed_from_messages
    threads: list[str] = []

    def keyed_from_messages(index: CardIndex, owner: str, message_ids: Any) -> list[Card]:
        threads.append(threading.current_thread().name)
        return looked_up(index, owner, message_ids)

    monkeypatch.setattr(CardIndex, "keyed_from_messages", keyed_from_messages)

    lines = memories(mem, user_id, "Tell me about my home.", 60)

    # Once, on a recall thread (started when the search found its cards), not the request's.
    assert len(threads) == 1 and threads[0].startswith("stratamem-recall"), threads
    stale = [line for line in lines if "My home is in Lyon" in line]
    assert stale and stale[0].startswith("[until 2 April 2025] [3 March 2025]"), lines
    assert_current_first(lines, "Berlin", "Lyon")


def test_chinese_the_current_city_first_and_the_old_one_marked(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    session(mem, user_id, 1, 0, ["我家在天津。"])
    session(mem, user_id, 2, 30, ["我们已经搬去西安了。"])

    lines = memories(mem, user_id, "我现在家在哪里？", 60)

    assert "西安" in lines[0], lines
    assert_current_first(lines, "西安", "天津")
    assert any("天津" in line for line in lines), lines  # the old excerpt is found, and marked


def test_where_did_i_live_before_finds_the_value_current_before_it(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    session(mem, user_id, 1, 0, ["I live in Cork."])
    session(mem, user_id, 2, 20, ["I live in Lyon."])
    session(mem, user_id, 3, 40, ["I moved to Berlin."])

    lines = memories(mem, user_id, "Where did I live before Berlin?", 60)

    lyon = [line for line in lines if "Lyon" in line]
    assert lyon, lines
    assert any("23 March 2025, until 12 April 2025" in line for line in lyon), lyon


def test_chinese_where_did_i_work_before(make_memory: Callable[..., Memory], user_id: str) -> None:
    mem = make_memory()
    session(mem, user_id, 1, 0, ["我在绿野食品工作。"])
    session(mem, user_id, 2, 30, ["我换了工作，现在在银杏网络。"])

    lines = memories(mem, user_id, "我之前在哪里工作？", 60)

    assert any("绿野食品" in line and "until 2 April 2025" in line for line in lines), lines


@pytest.mark.parametrize(
    ("question", "past"),
    [
        ("Where did I live before Cork?", True),
        ("What phone did I have previously?", True),
        ("Which company did I use to work for?", True),
        ("What was my old phone?", True),
        ("我之前住在哪里？", True),
        ("我以前在哪里工作？", True),
        ("Which city before Galway?", True),
        ("What did we decide before the launch?", True),
        ("Where do I live now?", False),
        ("How old am I?", False),
        ("What changed in deploy 12 before the team meets in Nairobi?", False),
        ("Remind me of the checklist before I leave.", False),
        ("我现在家在哪里？", False),
    ],
)
def test_a_question_about_the_past_is_told_apart(question: str, past: bool) -> None:
    assert asks_about_the_past(question) is past


@pytest.mark.parametrize(
    ("question", "now"),
    [
        ("Which instrument am I learning?", True),
        ("What do we drink in the mornings?", True),
        ("我现在用什么手机？", True),
        ("Where did I live before Cork?", False),
        ("What did I say about Rome?", False),
        ("Where was I born?", False),
        ("What was my old phone?", False),
        ("Where does Anna work?", False),
        ("When did Caroline go to the support group?", False),
        ("Which US cities does John mention visiting to Tim?", False),
        ("Where should we take us for dinner?", True),
        ("我之前住在哪里？", False),
    ],
)
def test_a_question_about_the_users_present_is_told_apart(question: str, now: bool) -> None:
    assert asks_about_now(question) is now


@pytest.mark.parametrize(
    ("question", "attributes"),
    [
        ("Where is my home now?", ("city",)),
        ("Which company am I with now?", ("employer",)),
        ("What phone do I use now?", ("phone",)),
        ("What do I eat these days?", ("diet",)),
        ("Which sport do I do now?", ("sport",)),
        ("What am I allergic to?", ("allergy:",)),
        ("我现在家在哪里？", ("city",)),
        ("我现在在哪里工作？", ("employer",)),
        ("我对什么过敏？", ("allergy:",)),
        ("What is our dog called?", ()),
        ("How do I descale a kettle?", ()),
    ],
)
def test_the_property_a_question_names(question: str, attributes: tuple[str, ...]) -> None:
    assert attributes_asked(question) == attributes


# --- the new user of issue 18, with a chat model that answers in prose -----------------------


@pytest.fixture
def prose_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(responder=lambda body: Reply("Sure, I will keep that in mind.")) as fake:
        yield fake


NEW_USER: list[tuple[int, list[str]]] = [
    (0, ["I live in Lyon.", "Our dog is called Rex.", "I'm allergic to peanuts."]),
    (7, ["My report is due on 5 April 2026.", "I live in Lyon, near the river."]),
    (37, ["I moved to Berlin.", "I live in Berlin now."]),
]
ZH_USER: list[tuple[int, list[str]]] = [
    (0, ["我住在天津。", "我家的狗叫旺财。", "我对花生过敏。"]),
    (7, ["报告的截止日期是2026年4月5日。"]),
    (37, ["我们已经搬去西安了。", "我住在西安。"]),
]
# (question, the value that must reach the prompt, a stale value that must not come first)
ASKED = [
    ("Where do I live now?", "Berlin", "Lyon"),
    ("What is my dog called?", "Rex", None),
    ("When is my report due?", "2026", None),
    ("What am I allergic to?", "peanuts", None),
]
ZH_ASKED = [
    ("我现在住在哪里？", "西安", "天津"),
    ("我家的狗叫什么？", "旺财", None),
    ("报告什么时候截止？", "2026", None),
    ("我对什么过敏？", "花生", None),
]


@pytest.mark.parametrize(("script", "asked"), [(NEW_USER, ASKED), (ZH_USER, ZH_ASKED)])
def test_the_new_users_sessions_replayed_with_a_prose_model(
    make_memory: Callable[..., Memory],
    validity_database: Database,
    prose_server: FakeOpenAI,
    user_id: str,
    script: list[tuple[int, list[str]]],
    asked: list[tuple[str, str, str | None]],
) -> None:
    mem = make_memory(prose_server.base_url)
    for number, (day, said) in enumerate(script, start=1):
        session(mem, user_id, number, day, said)

    problems = chain_problems(chains(validity_database, user_id))
    assert not problems, problems
    for question, current, stale in asked:
        lines = memories(mem, user_id, question, 60)
        assert any(current in line for line in lines), (question, lines)
        if stale is not None:
            assert_current_first(lines, current, stale)
    assert prose_server.requests  # the model was asked, and its prose replaced by the rules


def test_a_fact_restated_then_changed_in_one_session_leaves_one_current_card(
    make_memory: Callable[..., Memory],
    validity_database: Database,
    prose_server: FakeOpenAI,
    user_id: str,
) -> None:
    # Lyon, Berlin, Lyon again, Berlin again in one session, with no timestamps (the database
    # clock: equal times for the whole batch).
    mem = make_memory(prose_server.base_url)
    statements = ["I live in Lyon.", "I moved to Berlin.", "I live in Lyon.", "I live in Berlin."]
    messages: list[dict[str, Any]] = [
        message
        for text in statements
        for message in ({"role": "user", "content": text}, {"role": "assistant", "content": "Ok."})
    ]
    mem.record(user_id=user_id, session_id="s1", messages=messages)
    mem.end_session(user_id=user_id, session_id="s1")

    links = chains(validity_database, user_id)
    assert not chain_problems(links), links
    current = [link for link in links if link.attribute == "city" and link.superseded_by is None]
    assert len(current) == 1
