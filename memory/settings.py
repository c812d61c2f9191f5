"""The one settings object, read from arguments and ``STRATAMEM_*`` environment variables."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory.context.tokens import DEFAULT_MODEL
from memory.errors import ConfigurationError
from storage import default_data_dir

__all__ = ["CardSettings", "JobSettings", "ReportSettings", "Settings", "SummarySettings"]


class SummarySettings(BaseModel):
    """How and when the rolling summary is written; the defaults are the documented ones.

    Attributes:
        mode: ``background`` (a queued job a worker runs) or ``inline`` (inside ``prepare``).
        model: the summariser model; ``None`` means the top-level ``model``.
        fallback_model: tried when ``model`` failed ``retries`` times; ``None`` for none.
        retries: attempts with ``model`` (3 means the first call and two more).
        fallback_retries: attempts with ``fallback_model`` (0 skips it).
        timeout: seconds per call.
        temperature: sampling temperature.
        backoff_seconds: the wait before the second attempt; it doubles for each next one.
        max_backoff_seconds: the longest wait between two attempts.
        trigger_ratio: consolidate once the raw messages after the boundary exceed this share
            of the history budget.
        target_ratio: after consolidating, keep about this share of the trigger raw.
        ratio: a summary is at most this share of what it replaces (previous summary plus
            folded messages, in tokens).
        max_tokens: hard cap on a summary (never more than a quarter of the history budget).
        min_tokens: the limit never drops below this (or below what is replaced).
        overshoot: a reply up to ``limit * (1 + overshoot)`` tokens is cut to the limit; a
            longer one is a failed attempt.
        min_retention: a reply must keep at least this share of the previous summary's key
            facts (numbers, ids, names, dates), else it is a failed attempt; see
            ``memory.summary.acceptance``. 0 turns the check off.
        archive_chars: each line of a raw archive is cut to this many characters.
        prompt_chars_per_message: each message in the summariser's prompt is cut to this.
        debounce_seconds: a queued consolidation waits this long for more messages.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **values: Any) -> None:
        with _as_configuration_error("summary settings", type(self)):
            super().__init__(**values)

    mode: Literal["background", "inline"] = "background"
    model: str | None = None
    fallback_model: str | None = None
    retries: int = Field(default=3, ge=1)
    fallback_retries: int = Field(default=3, ge=0)
    timeout: float = Field(default=60.0, gt=0)
    temperature: float = Field(default=0.3, ge=0, le=2)
    backoff_seconds: float = Field(default=0.5, ge=0)
    max_backoff_seconds: float = Field(default=8.0, ge=0)
    trigger_ratio: float = Field(default=0.5, gt=0, le=1)
    target_ratio: float = Field(default=0.6, gt=0, le=1)
    ratio: float = Field(default=0.3, gt=0, le=1)
    max_tokens: int = Field(default=1_024, ge=1)
    min_tokens: int = Field(default=64, ge=1)
    overshoot: float = Field(default=0.5, ge=0)
    min_retention: float = Field(default=0.5, ge=0, le=1)
    archive_chars: int = Field(default=500, ge=20)
    prompt_chars_per_message: int = Field(default=2_000, ge=20)
    debounce_seconds: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _min_within_max(self) -> Self:
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens {self.min_tokens} > max_tokens {self.max_tokens}")
        return self


class CardSettings(BaseModel):
    """Long-term memory: archived turns, extracted cards, recall and pins.

    Attributes:
        enabled: recall cards in ``prepare`` and archive messages that leave the window.
        k: how many memories ``prepare`` recalls at most (pins come on top); overlapping
            turn cards are merged into one memory.
        min_score: the relevance gate: a card below this cosine similarity to the query is
            recalled only when it holds half of the query's words. ``None``: the value
            measured for the embedder (``retrieval.search_config_for``: 0.30 for MiniLM).
        max_tokens: the most tokens the recalled memories take in the prompt (pins aside),
            or ``None`` for ``k`` alone.
        pin_budget_ratio: pinned cards may take at most this share of the history budget.
        idle_seconds: a session idle this long is treated as ended (by the worker).
        archive_promptly: in background mode, ``record`` queues a ``cards`` job, due
            ``debounce_seconds`` later, that makes cards (turn cards and extracted ones) of
            every message of the session not archived yet (the inputs ``prepare`` stored
            included), so the user's other sessions recall them within seconds. Off, messages
            become cards when a fold takes them out of the window, at ``end_session``, or
            after ``idle_seconds``. Inline mode archives at folds and ``end_session`` either
            way.
        debounce_seconds: how long that job waits for more messages.
        embedder: ``minilm`` (all-MiniLM-L6-v2, offline), ``minilm-int8`` (the same model with
            int8 weights, quantized offline from it: a query embeds faster, its vectors are
            its own, so a database embedded with one is not opened with the other) or
            ``hashing`` (a model-free fake).
        rewrite_deadline_ms: the longest ``prepare`` waits for the chat model to rewrite an
            input the rules cannot make self-contained; 0 (the default) never asks the model
            (``prepare`` never waits for an LLM). A late answer is dropped, never awaited.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **values: Any) -> None:
        with _as_configuration_error("cards settings", type(self)):
            super().__init__(**values)

    enabled: bool = True
    k: int = Field(default=4, ge=0)
    min_score: float | None = Field(default=None, ge=-1, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    pin_budget_ratio: float = Field(default=0.1, ge=0, le=1)
    idle_seconds: float = Field(default=1_800.0, gt=0)
    archive_promptly: bool = True
    debounce_seconds: float = Field(default=5.0, ge=0)
    embedder: Literal["minilm", "minilm-int8", "hashing"] = "minilm"
    rewrite_deadline_ms: int = Field(default=0, ge=0)


class JobSettings(BaseModel):
    """Background jobs once they are finished.

    Attributes:
        done_retention_seconds: a job done this long ago is deleted by the worker, in its idle
            time (a day: its row only says that it ran).
        failed_retention_seconds: a job that failed for good this long ago is deleted likewise
            (30 days: its last error says what went wrong, for whoever looks).
        worker_niceness: the niceness the ``stratamem worker`` process runs at (0 to 19; 10:
            its card embedding gives the cores to requests while they want them, and runs at
            full speed otherwise; 0 leaves its priority as it is). A worker run in a process
            that serves requests (the proxy, ``stratamem chat``) keeps the process's priority.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **values: Any) -> None:
        with _as_configuration_error("jobs settings", type(self)):
            super().__init__(**values)

    done_retention_seconds: float = Field(default=86_400.0, ge=0)
    failed_retention_seconds: float = Field(default=30 * 86_400.0, ge=0)
    worker_niceness: int = Field(default=10, ge=0, le=19)


class ReportSettings(BaseModel):
    """The reports of ``prepare`` kept for the inspector page (``stratamem ui``).

    Attributes:
        enabled: keep each request's report (written off the request path by a thread).
        keep: how many reports each session keeps, the newest.
        queue: reports waiting to be written, at most; a request whose report finds the queue
            full leaves it unkept (counted) rather than wait.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **values: Any) -> None:
        with _as_configuration_error("reports settings", type(self)):
            super().__init__(**values)

    enabled: bool = True
    keep: int = Field(default=1_000, ge=1)
    queue: int = Field(default=10_000, ge=1)


class Settings(BaseSettings):
    """Every setting of stratamem, with its default.

    Values come from constructor arguments first, then ``STRATAMEM_<NAME>`` environment
    variables; a group's fields are ``STRATAMEM_<GROUP>__<NAME>`` (e.g.
    ``STRATAMEM_SUMMARY__RETRIES``) or a dict argument (``summary={"retries": 1}``). The LLM
    endpoint also honours the standard ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``. Settings are
    read once, where a ``Memory`` is opened.
    """

    model_config = SettingsConfigDict(
        env_prefix="STRATAMEM_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
        populate_by_name=True,
    )

    def __init__(self, **values: Any) -> None:
        with _as_configuration_error("settings", type(self)):
            super().__init__(**values)

    database_url: str | None = Field(
        default=None, description="Postgres URL; unset means the embedded server."
    )
    data_dir: Path = Field(default_factory=default_data_dir)

    model: str = DEFAULT_MODEL
    context_window: int | None = Field(default=None, gt=0)
    max_output: int | None = Field(default=None, ge=0)
    safety_margin: int | None = Field(default=None, ge=0)
    recent_messages: int = Field(default=5, ge=0)
    tool_result_max_tokens: int | None = Field(default=None, gt=0)

    llm_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("STRATAMEM_LLM_BASE_URL", "OPENAI_BASE_URL")
    )
    llm_api_key: str | None = Field(
        default=None,
        repr=False,
        validation_alias=AliasChoices("STRATAMEM_LLM_API_KEY", "OPENAI_API_KEY"),
    )
    summary: SummarySettings = Field(default_factory=SummarySettings)
    cards: CardSettings = Field(default_factory=CardSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    reports: ReportSettings = Field(default_factory=ReportSettings)

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, url: str | None) -> str | None:
        # Checked here, before anything connects: another database would fail deep inside the
        # first migration, after its driver may already have created a file.
        if url is None:
            return url
        scheme, _, driver = url.partition("://")[0].partition("+")
        if scheme not in ("postgres", "postgresql") or "://" not in url:
            raise ValueError(
                f"stratamem needs PostgreSQL with pgvector, not {scheme or url!r}: give a "
                "postgresql:// (or postgres://) URL, or none for the embedded database"
            )
        if driver not in ("", "psycopg", "psycopg2"):
            # psycopg2 URLs are run with psycopg 3 (same server, same URL); others cannot be.
            raise ValueError(
                f"stratamem talks to PostgreSQL through psycopg 3, not {driver!r}: give a "
                "postgresql:// or postgresql+psycopg:// URL"
            )
        return url

    @property
    def llm_configured(self) -> bool:
        """Whether an LLM endpoint is configured (a key or a base URL)."""
        return bool(self.llm_api_key or self.llm_base_url)


class _as_configuration_error:
    """Turn a pydantic ``ValidationError`` into a ``ConfigurationError`` naming the setting.

    A misspelt name gets the closest valid one suggested.
    """

    def __init__(self, what: str, model: type[BaseModel]) -> None:
        self._what = what
        self._names = list(model.model_fields)

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, error: BaseException | None, traceback: object) -> None:
        if isinstance(error, ValidationError):
            problems = [self._describe(item) for item in error.errors()]
            raise ConfigurationError(f"invalid {self._what}: " + "; ".join(problems)) from error

    def _describe(self, item: Any) -> str:
        where = ".".join(str(part) for part in item["loc"]) or "value"
        if item["type"] == "extra_forbidden":
            name = str(item["loc"][-1])
            close = difflib.get_close_matches(name, self._names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"unknown setting {where!r}{hint}"
        return f"{where}: {item['msg'].removeprefix('Value error, ')}"
