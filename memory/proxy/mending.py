"""A request's messages made storable: what memory would refuse is repaired, the same way each time.

A client that resends its whole history sends a message memory refused on every later
request too; refused, it would turn memory off for the rest of the conversation. So before
the messages are compared with the stored ones and stored, two things are repaired, as cards
already are (``memory.longterm.archiving``):

- a lone surrogate (half of a UTF-16 pair, which no UTF-8 database or upstream can take) in
  any string of any message becomes U+FFFD;
- a message other than a tool result, and other than the request's input, that alone is
  larger than the history budget keeps its head and tail around a marker saying how many
  tokens were cut (``[… N tokens cut by stratamem …]``), as the window cuts a tool result.

Both are deterministic: the resent message is repaired into exactly what was stored, and so
recognised as stored. The request's own input is never cut: it is sent as the user wrote it,
or refused (a 400) when it cannot fit. An assistant message whose tool calls alone pass the
budget cannot be cut and stays as it is. Only bodies that may hold such a message are looked
at (a surrogate escape in the JSON, a body larger than the budget, images): a usual request
costs two scans of its bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from memory.context.cut import cut_marker, cut_to_tokens
from memory.context.messages import Message
from memory.context.tokens import REPLY_PRIMING_TOKENS, TokenCounter
from memory.session.incoming import CLIENT_KEYS

__all__ = ["Mender"]

#: A surrogate written as a JSON escape: the only way a lone one can arrive in UTF-8 JSON.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: Content parts whose tokens do not follow their bytes (an image URL is short, its cost not).
_COSTLY_PART = re.compile(rb'"(?:image_url|input_audio|file)"')


class Mender:
    """Repairs what memory would refuse in a request's messages.

    Args:
        counter: the memory's token counter.
        history_budget: the memory's history budget, in tokens.
    """

    def __init__(self, counter: TokenCounter, history_budget: int) -> None:
        self._counter = counter
        self._budget = history_budget

    def mend(self, messages: list[Any], raw: bytes) -> tuple[list[Any], int]:
        """The messages with what memory refuses repaired, and how many were changed.

        Args:
            messages: the request's messages (the body's ``messages``), never changed.
            raw: the request's body as received (only scanned for what may need repair).
        """
        mended = list(messages)
        changed = 0
        if _SURROGATE_ESCAPE.search(raw):
            for index, message in enumerate(mended):
                repaired = _without_lone_surrogates(message)
                if repaired is not message:
                    mended[index] = repaired
                    changed += 1
        # A token is at least one byte: a body of fewer bytes than the budget holds no message
        # over it, unless it has parts whose cost is not their bytes.
        if len(raw) + REPLY_PRIMING_TOKENS > self._budget or _COSTLY_PART.search(raw):
            for index, message in enumerate(mended):
                if index == len(mended) - 1 and _role(message) == "user":
                    continue  # the input: sent as written, or refused
                repaired = self.fit(message)
                if repaired is not message:
                    mended[index] = repaired
                    changed += 1
        return mended, changed

    def reply(self, message: dict[str, Any]) -> dict[str, Any]:
        """A model's reply as it can be stored (and as its resent copy will be repaired)."""
        mended: dict[str, Any] = self.fit(_without_lone_surrogates(message))
        return mended

    def fit(self, message: Any) -> Any:
        """``message`` cut to the history budget when it alone passes it; else itself."""
        if not isinstance(message, Mapping) or _role(message) == "tool":
            return message
        size = _text_bytes(message)
        if size is not None and size <= self._fit_tokens(0):
            return message  # fewer bytes than the budget: fewer tokens too
        try:
            parsed = Message.from_openai(_without_client_keys(message))
        except ValueError:
            return message  # malformed: refused later, as before
        tokens = self._counter.count_message(parsed)
        if tokens + REPLY_PRIMING_TOKENS <= self._budget:
            return message
        frame = self._counter.count_message(parsed.model_copy(update={"content": ""}))
        room = self._fit_tokens(frame)
        text = parsed.text
        kept = cut_to_tokens(text, room, self._counter, keep="both") if room > 0 else None
        if kept is None or kept == text:
            kept = cut_marker(tokens)
        cut = {**message, "content": kept}
        fitted = Message.from_openai(_without_client_keys(cut))
        if self._counter.count_message(fitted) + REPLY_PRIMING_TOKENS > self._budget:
            return message  # its tool calls alone pass the budget: nothing to cut
        return cut

    def _fit_tokens(self, frame: int) -> int:
        return self._budget - REPLY_PRIMING_TOKENS - frame


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, Mapping) else None


def _without_client_keys(message: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key not in CLIENT_KEYS}


def _text_bytes(message: Mapping[str, Any]) -> int | None:
    """The UTF-8 bytes of every string in a message (a bound of its tokens, less overhead), or
    ``None`` when it has a content part whose tokens its bytes do not bound."""
    content = message.get("content")
    if isinstance(content, list) and any(
        not isinstance(part, Mapping) or part.get("type") != "text" for part in content
    ):
        return None
    return _bytes(message)


def _bytes(value: Any) -> int:
    if isinstance(value, str):
        # Message overhead is a few tokens; count every string's length as a byte more.
        return len(value.encode("utf-8", "surrogatepass")) + 1
    if isinstance(value, Mapping):
        return sum(_bytes(key) + _bytes(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return sum(_bytes(item) for item in value)
    return 8


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (dict keys too) replaced by U+FFFD;
    ``value`` itself when it has none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, dict):
        pairs = [
            (key, item, _without_lone_surrogates(key), _without_lone_surrogates(item))
            for key, item in value.items()
        ]
        if all(new_key is key and new_item is item for key, item, new_key, new_item in pairs):
            return value
        return {new_key: new_item for _, _, new_key, new_item in pairs}
    if isinstance(value, list):
        items = [_without_lone_surrogates(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items
    return value
