"""The demo's scripted conversation: four sessions of an on-call assistant, English and Chinese.

A user states facts and preferences early (session 1 in English, session 2 in Chinese), changes
one of them later and pins a rule (session 3), then opens a new session weeks later and asks
about what was said in the first ones. Between the facts, ops turns with tool calls (one or two
calls at once, long log results) make the history grow far past the window. Pure data: no I/O.
"""

# ruff: noqa: RUF001 (Chinese text has full-width punctuation)

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "QUESTIONS",
    "SYSTEM",
    "ScriptSession",
    "ScriptTurn",
    "demo_script",
    "questions_session",
]

SYSTEM = "You are Ops Copilot, the on-call assistant of a small e-commerce team."

#: What the user asks in the last session, about things said weeks before.
QUESTIONS = (
    "Which database do we use for the orders service?",
    "我上次说的监控工具是什么？",
    "Where do I live these days?",
)


@dataclass(frozen=True, slots=True)
class ScriptTurn:
    """One turn: the user's input and the assistant's messages that answer it (tools included)."""

    input: str
    replies: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ScriptSession:
    """One session: its id, when it starts, its turns, and a fact the user pins at its start."""

    id: str
    start: datetime
    turns: tuple[ScriptTurn, ...]
    pin: str | None = None
    language: str = field(default="en")


_FACTS_1 = (
    ("My name is Mei Chen, I run the on-call rota.", "Nice to meet you, Mei."),
    ("We use PostgreSQL 16 for the orders database.", "Noted: orders live in PostgreSQL 16."),
    ("I prefer answers in bullet points.", "Bullet points it is."),
    ("I live in Berlin.", "Noted, Berlin time for your pages."),
    (
        "Remind me to renew the TLS certificate of the shop on 30 September.",
        "I will remind you about the certificate.",
    ),
)
_FACTS_2 = (
    ("我们用的是 Grafana 做监控。", "好的，监控用 Grafana。"),
    ("我喜欢简洁的回答。", "明白，回答会尽量简洁。"),
    ("记得周五前把发布说明发给团队。", "好的，周五前提醒你发发布说明。"),
)
_FACTS_3 = (
    ("I moved to Lisbon last month.", "Noted: Lisbon time from now on."),
    ("I finished renewing the TLS certificate of the shop.", "Great, the task is closed."),
)
_PIN = "Never restart the payments database during business hours (09:00-18:00)."


def demo_script(filler: int) -> list[ScriptSession]:
    """The three sessions of facts and ops, ``filler`` ops turns each (the questions come apart).

    Raises:
        ValueError: ``filler`` is negative.
    """
    if filler < 0:
        raise ValueError(f"filler turns cannot be negative: {filler}")
    return [
        _session("s1", datetime(2026, 9, 1, 8, 0, tzinfo=UTC), _FACTS_1, filler, "en"),
        _session("s2", datetime(2026, 9, 15, 8, 0, tzinfo=UTC), _FACTS_2, filler, "zh"),
        _session("s3", datetime(2026, 10, 3, 8, 0, tzinfo=UTC), _FACTS_3, filler, "en", _PIN),
    ]


def questions_session() -> ScriptSession:
    """The new session weeks later: only questions about the first sessions."""
    turns = tuple(
        ScriptTurn(q, ({"role": "assistant", "content": "(offline demo)"},)) for q in QUESTIONS
    )
    return ScriptSession("s4", datetime(2026, 11, 20, 9, 0, tzinfo=UTC), turns)


def _session(
    session_id: str,
    start: datetime,
    facts: tuple[tuple[str, str], ...],
    filler: int,
    language: str,
    pin: str | None = None,
) -> ScriptSession:
    turns = [
        ScriptTurn(said, ({"role": "assistant", "content": answer},)) for said, answer in facts
    ]
    ops = _ops_turn_zh if language == "zh" else _ops_turn_en
    turns += [ops(f"{session_id}-{n}", n) for n in range(filler)]
    return ScriptSession(session_id, start, tuple(turns), pin, language)


def _ops_turn_en(call_id: str, n: int) -> ScriptTurn:
    if n % 4 == 3:
        return ScriptTurn(
            "Thanks, that helps.", ({"role": "assistant", "content": "Glad it helps."},)
        )
    if n % 4 == 1:
        return ScriptTurn(
            f"Is the orders-worker queue backing up again ({n})?",
            (
                *_two_calls(call_id, "get_metric", "orders-worker queue depth", n),
                {"role": "assistant", "content": f"Queue depth peaked at {40 + n} and drains."},
            ),
        )
    return ScriptTurn(
        f"Checkout p95 latency looks high again ({n}). What do the logs say?",
        (
            *_one_call(call_id, "search_logs", "checkout", n),
            {"role": "assistant", "content": "Payment calls are close to the 2 s timeout."},
        ),
    )


def _ops_turn_zh(call_id: str, n: int) -> ScriptTurn:
    if n % 4 == 3:
        return ScriptTurn("谢谢，明白了。", ({"role": "assistant", "content": "不客气。"},))
    return ScriptTurn(
        f"结账服务又变慢了（第{n}次），帮我查一下日志。",
        (
            *_one_call(call_id, "search_logs", "checkout", n),
            {"role": "assistant", "content": "支付调用接近 2 秒的超时。"},
        ),
    )


def _one_call(call_id: str, tool: str, subject: str, n: int) -> tuple[dict[str, Any], ...]:
    return (
        {"role": "assistant", "content": None, "tool_calls": [_call(call_id, tool, subject)]},
        {"role": "tool", "tool_call_id": call_id, "content": _log(subject, n)},
    )


def _two_calls(call_id: str, tool: str, subject: str, n: int) -> tuple[dict[str, Any], ...]:
    """Two calls in one assistant message (parallel tool calls), then both results."""
    first, second = f"{call_id}-a", f"{call_id}-b"
    return (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(first, tool, subject), _call(second, tool, subject + " (p95)")],
        },
        {"role": "tool", "tool_call_id": first, "content": _log(subject, n)},
        {"role": "tool", "tool_call_id": second, "content": _log(subject + " p95", n + 1)},
    )


def _call(call_id: str, tool: str, subject: str) -> dict[str, Any]:
    arguments = '{"query": "%s"}' % subject  # noqa: UP031 (JSON braces)
    return {"id": call_id, "type": "function", "function": {"name": tool, "arguments": arguments}}


def _log(subject: str, n: int) -> str:
    """Eight log lines: what makes a tool result long, as real ones are."""
    moment = datetime(2026, 9, 1, tzinfo=UTC) + timedelta(minutes=n)
    return "\n".join(
        f"{moment:%Y-%m-%dT%H:%M}:{second:02d}Z {subject} node-{second % 3} WARN "
        f"payment call took {1800 + 7 * second + n} ms (order {n * 1000 + second})"
        for second in range(8)
    )
