"""A backlog folded in steps leaves the window what the fold policy keeps, not one message.

A step reads at most ``MAX_STEP_MESSAGES`` messages (or the step's tokens plus the trigger).
When what follows the read is a single message, folding the read whole left that message alone
in the window: 10,000 messages recorded, then a ``prepare`` on a 109,056-token history budget,
sent 18 tokens of window and a 2,075-token raw archive of the 9,999 others.
"""

from __future__ import annotations

import uuid

import pytest

import memory.summary.consolidator as consolidator
from memory import Memory, Settings
from memory.summary.policy import FoldPolicy
from storage import Database

# A 3,503-token history budget: the fold's trigger is 1,751 tokens, its target 1,050.
SMALL = {"context_window": 4096, "max_output": 512, "cards": {"enabled": False}}


def turns(count: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [
        {"role": roles[i % 2], "content": f"message {i}: I moved to city number {i}."}
        for i in range(count)
    ]


def kept_tokens(memory: Memory) -> int:
    """What the fold policy keeps of the history budget: its target."""
    return FoldPolicy.for_history_budget(memory.budget.history).target_tokens


@pytest.mark.parametrize("mode", ["background", "inline"])
def test_a_read_cut_by_its_message_count_leaves_the_window_its_target(
    database: Database, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setattr(consolidator, "MAX_STEP_MESSAGES", 240)
    memory = Memory(database, Settings(**SMALL, summary={"mode": mode}))
    user, session = f"u-{uuid.uuid4().hex[:8]}", "long"
    # 4,097 tokens: the first read stops at 240 messages, one follows it.
    memory.record(user_id=user, session_id=session, messages=turns(241))

    context = memory.prepare(user_id=user, session_id=session, input="Where do I live now?")

    # Background: prepare archived raw what the cap would drop; inline: record folded it.
    assert context.report.summary is not None
    # Folding the read whole left 32 tokens of window (background) or 368 (inline).
    assert context.report.tokens.window >= kept_tokens(memory) - 20
    summary = memory.summary(user_id=user, session_id=session)
    assert summary is not None and summary.covered < 240 - 50


def test_a_read_within_the_trigger_still_moves_the_backlog_by_half(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidator, "MAX_STEP_MESSAGES", 40)  # 680 tokens: within the trigger
    memory = Memory(database, Settings(**SMALL, summary={"mode": "inline"}))
    user, session = f"u-{uuid.uuid4().hex[:8]}", "long"
    memory.record(user_id=user, session_id=session, messages=turns(300))

    summary = memory.summary(user_id=user, session_id=session)
    assert summary is not None
    assert summary.version <= 20  # about 20 messages a step, not one unit a step
    context = memory.prepare(user_id=user, session_id=session, input="Where do I live now?")
    # The target is 62 such messages, more than a read: half a read at least is left.
    [_summary, *window, _input] = context.messages
    assert len(window) >= 40 // 2
