"""The one settings object, read from arguments and ``STRATAMEM_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage import default_data_dir

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Every setting of stratamem, with its default.

    Values come from constructor arguments first, then ``STRATAMEM_<NAME>`` environment
    variables. The LLM endpoint also honours the standard ``OPENAI_BASE_URL`` and
    ``OPENAI_API_KEY``. Settings are read once, in ``Memory.open``.
    """

    model_config = SettingsConfigDict(
        env_prefix="STRATAMEM_", frozen=True, extra="forbid", populate_by_name=True
    )

    database_url: str | None = Field(
        default=None, description="Postgres URL; unset means the embedded server."
    )
    data_dir: Path = Field(default_factory=default_data_dir)

    model: str = "gpt-4o-mini"
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
    summary_model: str | None = Field(default=None, description="Defaults to `model`.")
    summary_fallback_model: str | None = None
    summary_mode: Literal["background", "inline"] = "background"
    summary_trigger_ratio: float = Field(default=0.5, gt=0, le=1)
    summary_target_ratio: float = Field(default=0.6, gt=0, le=1)
    summary_retries: int = Field(default=3, ge=1)
    summary_backoff_seconds: float = Field(
        default=0.5, ge=0, description="Wait before a summary retry; doubles for each next one."
    )
    summary_fallback_retries: int = Field(default=3, ge=0)
    summary_timeout: float = Field(default=60.0, gt=0)
    summary_temperature: float = Field(default=0.3, ge=0, le=2)
    summary_max_tokens: int = Field(default=1_024, ge=64)
    summary_archive_chars: int = Field(default=500, ge=20)
    summary_debounce_seconds: float = Field(default=1.0, ge=0)

    @property
    def llm_configured(self) -> bool:
        """Whether a summariser endpoint is configured (a key or a base URL)."""
        return bool(self.llm_api_key or self.llm_base_url)
