"""Query rewriting: rules resolve references from recent turns, the model when they cannot."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fake_openai import FakeOpenAI, Hang, Malformed, Reply, Status

from memory.cards.rewrite import Deadline, Rewrite, rewrite_query
from memory.context.messages import Message
from memory.llm import LLMChain, OpenAIChatModel


def turns(*pairs: tuple[str, str]) -> list[Message]:
    return [Message(role=role, content=text) for role, text in pairs]  # type: ignore[arg-type]


KNOWLEDGE_BASE = turns(
    ("user", "Which of our tools handles docs?"),
    ("assistant", "Knowledge base A supports import from Notion."),
)

# (recent turns, input, rewritten query, antecedent)
RESOLVED: list[tuple[list[Message], str, str, str]] = [
    (KNOWLEDGE_BASE, "what about its export?", "what about Knowledge base A's export?",
     "Knowledge base A"),
    (turns(("user", "We run PostgreSQL in production.")), "how do I back it up?",
     "how do I back PostgreSQL up?", "PostgreSQL"),
    (turns(("assistant", "You could try plan B for the rollout.")), "does that work on Fridays?",
     "does plan B work on Fridays?", "plan B"),
    (turns(("user", "I read \"The Pragmatic Programmer\" last year")), "who wrote it?",
     "who wrote The Pragmatic Programmer?", "The Pragmatic Programmer"),
    (turns(("user", "Try Node.js"), ("assistant", "Sure.")), "is it fast?", "is Node.js fast?",
     "Node.js"),
    (turns(("user", "Kubernetes keeps restarting pods"), ("assistant", "Let me look.")),
     "why does it do that", "why does Kubernetes do that", "Kubernetes"),
    (turns(("assistant", "GitHub Actions runs the tests.")), "it's slow", "GitHub Actions is slow",
     "GitHub Actions"),
    (turns(("user", "Acme Corp sent a quote")), "is their pricing fair?",
     "is Acme Corp's pricing fair?", "Acme Corp"),
    (turns(("user", "Grafana shows the latency")), "can they alert?",
     "can Grafana alert?", "Grafana"),
    (turns(("user", "我们讨论了缓存方案"), ("assistant", "好的, 我记下了")),
     "我上次说的那个方案怎么样", "缓存方案怎么样", "缓存方案"),
    (turns(("assistant", "知识库A支持从Notion导入")), "它的导出功能呢", "知识库A的导出功能呢",
     "知识库A"),
    (turns(("user", "我们用的是Redis")), "这个怎么备份", "Redis怎么备份", "Redis"),
    (turns(("assistant", "可以用《深度学习》这本书入门")), "那个作者是谁", "深度学习作者是谁",
     "深度学习"),
    (turns(("user", "我们有缓存方案和Redis集群"), ("assistant", "明白")), "那个方案的成本呢",
     "缓存方案的成本呢", "缓存方案"),
]  # fmt: skip


@pytest.mark.parametrize(("recent", "said", "query", "antecedent"), RESOLVED)
def test_rules_resolve_a_reference_from_the_recent_turns(
    recent: list[Message], said: str, query: str, antecedent: str
) -> None:
    assert rewrite_query(said, recent) == Rewrite(query, "rules", antecedent)


SELF_CONTAINED = [
    "which database do we use?",
    "what is my daughter's name",
    "is it possible to export to CSV?",
    "I think that we should ship on Monday",
    "what happened this week",
    "我们用的是什么数据库",
    "我女儿叫什么名字",
]


@pytest.mark.parametrize("said", SELF_CONTAINED)
def test_a_self_contained_input_is_returned_unchanged_by_rules(said: str) -> None:
    assert rewrite_query(said, KNOWLEDGE_BASE) == Rewrite(said, "rules")


AMBIGUOUS: list[tuple[list[Message], str]] = [
    (turns(("user", "We compared PostgreSQL and MySQL.")), "is it faster?"),
    (turns(("user", "hello"), ("assistant", "hi, how can I help?")), "what about it?"),
    ([], "what does it cost?"),
    (turns(("user", "我们比较了Redis和Memcached")), "它快吗"),
]


@pytest.mark.parametrize(("recent", "said"), AMBIGUOUS)
def test_without_a_model_an_undecided_reference_keeps_the_original(
    recent: list[Message], said: str
) -> None:
    assert rewrite_query(said, recent) == Rewrite(said, "original")


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def chain(
    server: FakeOpenAI, *, retries: int = 2, fallback: str | None = None, timeout: float = 5.0
) -> LLMChain:
    return LLMChain(
        OpenAIChatModel(base_url=server.base_url, api_key="test"),
        model="primary",
        fallback_model=fallback,
        retries=retries,
        fallback_retries=1,
        timeout=timeout,
        sleep=lambda _: None,
    )


COMPARED = turns(("user", "We compared PostgreSQL and MySQL."), ("assistant", "Both work."))


def test_the_model_resolves_what_the_rules_cannot(server: FakeOpenAI) -> None:
    server.script(Reply('{"query": "is MySQL faster than PostgreSQL?"}'))

    rewrite = rewrite_query("is it faster?", COMPARED, chat=chain(server))

    assert (rewrite.query, rewrite.method, rewrite.calls) == (
        "is MySQL faster than PostgreSQL?",
        "llm",
        1,
    )
    assert rewrite.tokens_in > 0
    (body,) = server.requests
    system, user = body["messages"]
    assert '{"query": "..."}' in system["content"]
    assert user["content"] == (
        "Recent conversation:\nWe compared PostgreSQL and MySQL.\nBoth work.\n\n"
        "Latest message:\nis it faster?"
    )


def test_the_model_is_not_asked_when_the_rules_decide(server: FakeOpenAI) -> None:
    rewrite = rewrite_query("what about its export?", KNOWLEDGE_BASE, chat=chain(server))

    assert rewrite.method == "rules"
    assert server.requests == []


@pytest.mark.parametrize(
    "bad",
    [
        Reply('{"query": '),
        Reply('{"q": "x"}'),
        Reply('{"query": ""}'),
        Reply('{"query": "' + "very long answer " * 40 + '"}'),
        Malformed(),
        Status(500),
    ],
)
def test_a_malformed_reply_is_retried(server: FakeOpenAI, bad: Reply | Malformed | Status) -> None:
    server.script(bad, Reply('```json\n{"query": "is MySQL fast?"}\n```'))

    rewrite = rewrite_query("is it fast?", COMPARED, chat=chain(server))

    assert (rewrite.query, rewrite.method, rewrite.calls) == ("is MySQL fast?", "llm", 2)


def test_a_reply_in_prose_is_not_asked_again_of_that_model(server: FakeOpenAI) -> None:
    server.script(Reply("MySQL is faster."), Reply('{"query": "is MySQL fast?"}'))

    rewrite = rewrite_query("is it fast?", COMPARED, chat=chain(server, fallback="backup"))

    assert (rewrite.query, rewrite.method, rewrite.calls) == ("is MySQL fast?", "llm", 2)
    assert [body["model"] for body in server.requests] == ["primary", "backup"]


def test_the_request_asks_for_the_query_schema_in_json_mode(server: FakeOpenAI) -> None:
    server.script(Reply('{"query": "is MySQL faster than PostgreSQL?"}'))

    rewrite_query("is it faster?", COMPARED, chat=chain(server))

    assert server.requests[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "query",
            "schema": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def test_when_every_model_fails_the_original_text_is_used(server: FakeOpenAI) -> None:
    server.script(Reply("{"), Reply('{"q": 1}'), Reply("still no json"))

    rewrite = rewrite_query("我们比较过它吗", COMPARED, chat=chain(server, fallback="backup"))

    assert (rewrite.query, rewrite.method, rewrite.calls) == ("我们比较过它吗", "original", 3)
    assert [body["model"] for body in server.requests] == ["primary", "primary", "backup"]


def arrived(server: FakeOpenAI, count: int) -> int:
    """How many requests the server holds once ``count`` arrived (waits 30 s at most)."""
    deadline = time.monotonic() + 30
    while len(server.requests) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(server.requests)


def test_a_deadline_abandons_a_model_that_sleeps_whatever_its_retries(server: FakeOpenAI) -> None:
    # The client would wait 30 s per attempt, three attempts with the fallback: the deadline
    # alone ends the wait, and the chain's retries cannot extend it.
    server.script(Hang('{"query": "is MySQL faster?"}'))
    try:
        rewrite = rewrite_query(
            "is it faster?",
            COMPARED,
            chat=chain(server, fallback="backup", timeout=30.0),
            deadline=Deadline(0.2),
        )
        # The abandoned call goes on: its request reaches the model, held until released.
        held = arrived(server, 1)
    finally:
        server.release()

    assert rewrite == Rewrite("is it faster?", "original", calls=1, late=True)
    assert held == 1


def test_a_deadline_starts_no_call_while_too_many_late_ones_run(server: FakeOpenAI) -> None:
    server.script(Hang('{"query": "is MySQL faster?"}'))
    deadline = Deadline(0.2, max_running=1)
    slow = chain(server, retries=1, timeout=30.0)
    try:
        first = rewrite_query("is it faster?", COMPARED, chat=slow, deadline=deadline)
        second = rewrite_query("is it faster?", COMPARED, chat=slow, deadline=deadline)
        held = arrived(server, 1)
    finally:
        server.release()

    assert (first.late, first.calls) == (True, 1)
    assert second == Rewrite("is it faster?", "original", calls=0, late=True)
    assert held == 1 and len(server.requests) == 1  # the second request asked nobody


def test_an_answer_within_the_deadline_is_used(server: FakeOpenAI) -> None:
    server.script(Reply('{"query": "is MySQL faster than PostgreSQL?"}'))

    rewrite = rewrite_query("is it faster?", COMPARED, chat=chain(server), deadline=Deadline(20))

    assert (rewrite.query, rewrite.method, rewrite.calls, rewrite.late) == (
        "is MySQL faster than PostgreSQL?",
        "llm",
        1,
        False,
    )


@pytest.mark.parametrize(("seconds", "running"), [(0, 1), (-1, 1), (1, 0)])
def test_a_deadline_needs_a_positive_wait_and_room_for_a_call(seconds: float, running: int) -> None:
    with pytest.raises(ValueError, match="need seconds > 0"):
        Deadline(seconds, max_running=running)
