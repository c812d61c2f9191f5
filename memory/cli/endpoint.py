"""The OpenAI-compatible endpoint the commands talk to, and its failures in one plain line."""

from __future__ import annotations

from urllib.parse import urlsplit

import openai

from memory.chat_models import NO_API_KEY
from memory.settings import Settings

__all__ = [
    "DEFAULT_BASE_URL",
    "describe_api_error",
    "endpoint_name",
    "open_client",
]

#: Where the ``openai`` client goes when no base URL is configured.
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def open_client(settings: Settings, *, timeout: float) -> openai.OpenAI:
    """An ``openai`` client for the configured endpoint; it never retries on its own.

    A base URL without a key gets ``NO_API_KEY``, as the summariser's client does.
    """
    return openai.OpenAI(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key or NO_API_KEY,
        timeout=timeout,
        max_retries=0,
    )


def endpoint_name(settings: Settings) -> str:
    """The endpoint as people know it: its base URL without credentials."""
    url = urlsplit(settings.llm_base_url or DEFAULT_BASE_URL)
    host = url.hostname or ""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{host}{port}{url.path}"


def describe_api_error(error: openai.OpenAIError, where: str) -> str:
    """One line saying what went wrong with the endpoint ``where``, never a traceback.

    Connection failures and timeouts say the server cannot be reached; HTTP errors give the
    status and the server's own message (cut short); a rejected key says so.
    """
    if isinstance(error, openai.APITimeoutError):
        return f"no answer from {where} in time"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__
        reason = f": {_first_line(str(cause))}" if cause is not None and str(cause) else ""
        return f"cannot reach {where}{reason}"
    if isinstance(error, openai.AuthenticationError):
        return f"{where} rejected the API key (HTTP 401): check OPENAI_API_KEY"
    if isinstance(error, openai.APIStatusError):
        return f"{where} answered HTTP {error.status_code}: {_first_line(_server_message(error))}"
    return f"{where}: {_first_line(str(error))}"


def _server_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    return error.message


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
