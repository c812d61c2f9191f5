"""Frozen pydantic records: what storage hands to its callers instead of database rows."""

from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Job",
    "MessageAt",
    "NewMessage",
    "Record",
    "StoredMessage",
    "SummaryKind",
    "SummaryRecord",
]

SummaryKind = Literal["llm", "raw"]


class Record(BaseModel):
    """The base of every record storage hands out: frozen, and no field it does not declare."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NewMessage(Record):
    """A message to append: the OpenAI-format dict plus what storage keeps beside it.

    Attributes:
        payload: The full OpenAI message dict, stored as is (NUL characters included).
        role: The message role, stored apart so queries need not open the payload.
        tokens: The token count, computed once by the caller.
        client_id: An id chosen by the client (at most ``MAX_ID_LENGTH`` characters);
            appending it again to a session is a no-op.
        metadata: Free-form JSON data kept with the message (NUL characters included).
        created_at: When the message was said; the database clock when None.
    """

    payload: dict[str, Any]
    role: str
    tokens: int = Field(ge=0)
    client_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None


class MessageAt(Protocol):
    """A stored message as far as a write made from it needs to name it: the session's seq and
    the message's id (never reused, so a session erased and started again cannot match)."""

    @property
    def seq(self) -> int:
        """Its position in the session (from 1)."""
        ...

    @property
    def id(self) -> int:
        """Its id."""
        ...


class StoredMessage(Record):
    """A message as stored, with its id and its position ``seq`` in the session (from 1)."""

    id: int
    user_id: str
    session_id: str
    seq: int
    role: str
    payload: dict[str, Any]
    tokens: int
    client_id: str | None
    metadata: dict[str, Any]
    created_at: datetime


class SummaryRecord(Record):
    """The rolling summary of a session, covering its messages up to ``boundary_seq``."""

    user_id: str
    session_id: str
    content: str
    kind: SummaryKind
    boundary_seq: int
    covered: int
    version: int
    updated_at: datetime


class Job(Record):
    """A claimed background job: what to do, and the claim that lets a worker update it.

    Attributes:
        id: The job's id.
        kind: What the job does.
        user_id: The user the session belongs to.
        session_id: The session the job works on.
        attempts: How many times the job has been claimed, this claim included. Every claim
            increments it, so together with ``claimed_by`` it identifies this claim: a worker
            whose job was taken over (its lease ran out) can no longer update it.
        claimed_by: The worker holding the claim.
        params: What the job needs to run as its queuer would have run it (JSON), given to
            ``JobQueue.enqueue``; empty for a job queued without any.
    """

    id: int
    kind: str
    user_id: str
    session_id: str
    attempts: int
    claimed_by: str
    params: dict[str, Any] = Field(default_factory=dict)
