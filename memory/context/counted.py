"""``CountedMessages``: a token counter and renderer for messages counted and rendered once.

The hard cap and the report count every message of a context, some more than once per request,
and the assembler renders each; a caller that holds the counts and renderings of most of them
already (the recent-message cache of ``memory.session``) hands them over as data with this
class. The counting and rendering stay here, in the core: nothing of the caller's is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.context.messages import Message
from memory.context.tokens import TokenCounter

__all__ = ["CountedMessages"]


class CountedMessages:
    """A ``TokenCounter`` that knows some messages' counts: each is a dict lookup, not a
    recount; and ``render``, which hands out copies of their renderings.

    Messages are known by identity, so a message made later (a tool result the cap cut) is
    counted by ``counter`` and rendered by ``Message.to_openai`` anew.

    Args:
        counter: the counter the counts were made with, for every other message.
        messages: the messages known.
        counts: each message's tokens by ``counter``.
        renderings: each message as ``Message.to_openai`` renders it.
    """

    def __init__(
        self,
        counter: TokenCounter,
        messages: Sequence[Message],
        counts: Sequence[int],
        renderings: Sequence[dict[str, Any]],
    ) -> None:
        self._counter = counter
        # The message is kept with its count: an id is only unique while its object lives.
        self._known = {
            id(message): (message, count, rendering)
            for message, count, rendering in zip(messages, counts, renderings, strict=True)
        }

    def render(self, message: Message) -> dict[str, Any]:
        """``message.to_openai()``: for a message known, a copy of its rendering.

        A copy, so a caller that edits the dicts it was given (as it may with a rendering)
        never edits the renderings held.
        """
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            copy: dict[str, Any] = _copied(known[2])
            return copy
        return message.to_openai()

    def count_message(self, message: Message) -> int:
        """Tokens of one message, its per-message overhead included."""
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        return self._counter.count_message(message)

    def count_text(self, text: str) -> int:
        """Tokens of a plain string."""
        return self._counter.count_text(text)


def _copied(value: Any) -> Any:
    """A copy of a JSON-like value: new dicts and lists, the same (immutable) leaves."""
    if type(value) is dict:
        copy = dict(value)  # most values are strings: copied at C speed, then left alone
        for key, item in copy.items():
            if type(item) is dict or type(item) is list:
                copy[key] = _copied(item)
        return copy
    if type(value) is list:
        return [_copied(item) for item in value]
    return value
