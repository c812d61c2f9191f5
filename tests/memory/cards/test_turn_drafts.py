"""Archived turns: the message as written, its speaker, its time and any date it states."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.cards.archived_turns import turn_draft
from memory.cards.model import SourceMessage
from memory.cards.supersede import ExistingCard, decide_supersede

SAID = datetime(2023, 5, 10, 15, tzinfo=UTC)


def test_a_turn_keeps_the_words_the_speaker_and_the_time() -> None:
    draft = turn_draft(SourceMessage("assistant", "  Booked TP1234 for May 12.\n", SAID, 7, "d-7"))

    assert draft is not None
    assert (draft.type, draft.text, draft.tags, draft.observed_at) == (
        "turn", "Booked TP1234 for May 12.", ("assistant",), SAID,
    )  # fmt: skip
    assert (draft.source_indices, draft.source_ids) == ((7,), ("d-7",))
    assert draft.occurred_at == datetime(2023, 5, 12, tzinfo=UTC)
    assert (draft.subject, draft.attribute, draft.precision) == (None, None, "day")


def test_a_turn_without_a_date_or_text() -> None:
    plain = turn_draft(SourceMessage("user", "我喜欢喝茶", SAID, 1))

    assert plain is not None and (plain.occurred_at, plain.source_ids) == (None, ())
    assert turn_draft(SourceMessage("tool", "   ", SAID, 2)) is None


def test_a_turn_never_supersedes_and_is_never_superseded() -> None:
    draft = turn_draft(SourceMessage("user", "I moved to Lisbon", SAID, 3))
    stored = ExistingCard(1, None, None, "turn", "I live in Porto")

    assert draft is not None
    assert decide_supersede(draft, [stored]).supersedes == ()
