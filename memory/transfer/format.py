"""The export format: JSON Lines, one record per line, each a JSON object naming its ``record``.

Version 1, in this order (docs/operations.md, "Export and import"):

- ``header``: ``format`` (``"stratamem-export"``), ``version`` (1), ``user_id``, ``exported_at``;
- per session: ``session`` (``session_id``, ``created_at``, ``archived_seq``: how far it was
  archived as cards), then its ``message`` lines in order (``session_id``, ``seq`` from 1,
  ``id``: the client id or null, ``message``: the OpenAI-format message, ``metadata``,
  ``created_at``), then its ``summary`` if it has one (``content``, ``kind``, ``boundary_seq``,
  ``covered``, ``version``, ``updated_at``);
- ``card`` lines (``ref``: the card's number in this file, ``type``, ``text``, ``topic``, ``tags``,
  ``session_id``, ``sources``: ``[session_id, seq]`` of each message it was made from,
  ``source_client_ids``, ``observed_at``, ``occurred_at``, ``valid_from``, ``valid_to``,
  ``superseded_by``: the ``ref`` of the card that replaced it, ``pinned``, ``subject``,
  ``attribute``, ``created_at``);
- ``item`` lines of framework stores (``namespace``, ``key``, ``value``, ``texts``: the indexed
  texts by path, ``created_at``, ``updated_at``).

Times are ISO 8601 with their offset. No embedding is exported: an import embeds again with its
own model, so an export moves between embedders.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from storage.cards.store import CardType
from storage.records import SummaryKind

__all__ = [
    "FORMAT",
    "VERSION",
    "CardLine",
    "Header",
    "ItemLine",
    "Line",
    "MessageLine",
    "SessionLine",
    "SummaryLine",
    "line_adapter",
]

#: The ``format`` of a header: what says the file is a stratamem export.
FORMAT = "stratamem-export"
#: The version of the format written; an import takes this one only.
VERSION = 1


class _Line(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Header(_Line):
    """The first line: what the file is, and whose data."""

    record: Literal["header"] = "header"
    format: Literal["stratamem-export"] = "stratamem-export"
    version: int
    user_id: str
    exported_at: datetime


class SessionLine(_Line):
    """A session; its messages and summary follow."""

    record: Literal["session"] = "session"
    session_id: str
    created_at: datetime
    archived_seq: int | None = None


class MessageLine(_Line):
    """One stored message of the session named."""

    record: Literal["message"] = "message"
    session_id: str
    seq: int
    id: str | None = None
    message: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class SummaryLine(_Line):
    """The rolling summary of the session named."""

    record: Literal["summary"] = "summary"
    session_id: str
    content: str
    kind: SummaryKind
    boundary_seq: int = Field(ge=0)
    covered: int = Field(ge=0)
    version: int
    updated_at: datetime


class CardLine(_Line):
    """A card, pins included, with its validity and sources."""

    record: Literal["card"] = "card"
    ref: int
    type: CardType
    text: str = Field(min_length=1)
    topic: str | None = None
    tags: list[str] = Field(default_factory=list)
    session_id: str | None = None
    sources: list[tuple[str, int]] = Field(default_factory=list)
    source_client_ids: list[str] = Field(default_factory=list)
    observed_at: datetime
    occurred_at: datetime | None = None
    valid_from: datetime
    valid_to: datetime | None = None
    superseded_by: int | None = None
    pinned: bool = False
    subject: str | None = None
    attribute: str | None = None
    created_at: datetime


class ItemLine(_Line):
    """An item of a framework store (LangGraph's)."""

    record: Literal["item"] = "item"
    namespace: list[str] = Field(min_length=1)
    key: str
    value: dict[str, Any]
    texts: dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


Line = Annotated[
    Header | SessionLine | MessageLine | SummaryLine | CardLine | ItemLine,
    Field(discriminator="record"),
]

#: Parses one line's JSON text into its record.
line_adapter: TypeAdapter[Line] = TypeAdapter(Line)
