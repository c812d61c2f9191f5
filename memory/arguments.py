"""The checks ``Memory`` makes of its own arguments, each refusal an ``InvalidArgumentError``.

They run before anything is read or stored. Storage's checks of a text (``check_text``,
``check_encodable``) are reused, their refusal raised as the facade's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from pydantic import ValidationError

from memory.errors import InvalidArgumentError
from retrieval import CardQuery
from storage import CardFilter, CardType, InvalidInputError, check_encodable, check_text

__all__ = ["check_fact", "check_forget_target", "search_plan"]


def search_plan(
    query: str,
    *,
    k: int,
    types: Sequence[CardType] | None,
    session_id: str | None,
    topic: str | None,
    tags: Sequence[str] | None,
    since: datetime | None,
    until: datetime | None,
    min_score: float | None,
    include_superseded: bool,
) -> CardQuery:
    """The plan of one ``Memory.search``, its arguments checked.

    Raises:
        InvalidArgumentError: ``query`` is not text (a lone surrogate), ``k`` is negative,
            ``types`` or ``tags`` is a single string, or a filter has the wrong type.
    """
    if not isinstance(query, str):
        raise InvalidArgumentError(f"query must be a string, not {type(query).__name__}")
    _as_argument_error(check_encodable, "query", query)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidArgumentError(f"k must be a whole number >= 0, not {k!r}")
    for name, listed in (("types", types), ("tags", tags)):
        if isinstance(listed, str):
            raise InvalidArgumentError(f"{name} must be a list of strings, not one string")
    try:
        where = CardFilter(
            types=tuple(types) if types is not None else None,
            session_id=session_id,
            topic=topic,
            tags=tuple(tags) if tags else None,
            since=since,
            until=until,
            include_superseded=include_superseded,
        )
        return CardQuery(k=k, where=where, min_score=min_score)
    except ValidationError as error:
        problem = error.errors()[0]
        where_wrong = ".".join(map(str, problem["loc"]))
        raise InvalidArgumentError(f"search filter {where_wrong}: {problem['msg']}") from None


def check_fact(text: str, tags: Sequence[str] | None, *, noun: str) -> None:
    """Check the text and tags of a fact to keep (``noun``: ``"pin"`` or ``"memory"``).

    Raises:
        InvalidArgumentError: ``text`` is not text, is blank or holds a NUL or a lone
            surrogate, or ``tags`` is one string.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a {noun}'s text must be a string, not {type(text).__name__}")
    _as_argument_error(check_text, f"{noun} text", text)
    if isinstance(tags, str):
        raise InvalidArgumentError("tags must be a list of strings, not one string")
    if not text.strip():
        raise InvalidArgumentError(f"a {noun} needs a text")


def check_forget_target(card_id: int | None, session_id: str | None) -> None:
    """Check that ``forget`` was given one target at most.

    Raises:
        InvalidArgumentError: both ``card_id`` and ``session_id`` were given.
    """
    if card_id is not None and session_id is not None:
        raise InvalidArgumentError(
            "forget one card (card_id) or one session (session_id), not both"
        )


def _as_argument_error(check: Callable[[str, str], None], name: str, value: str) -> None:
    """Run one of storage's checks of a text, its refusal raised as the facade's own error."""
    try:
        check(name, value)
    except InvalidInputError as refused:
        raise InvalidArgumentError(str(refused)) from None
