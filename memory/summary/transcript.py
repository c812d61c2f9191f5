"""Messages as plain text lines: the summariser's request and the raw archive."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from memory.context.cut import cut_to_chars, one_line
from memory.context.messages import Message

__all__ = [
    "INSTRUCTIONS",
    "SUMMARY_RULES",
    "compact_json",
    "raw_archive",
    "render_fold_transcript",
    "render_line",
    "render_transcript",
    "sanitize_text",
    "summary_material",
    "summary_request",
]

#: What a NUL character becomes in stored text: Postgres ``text`` cannot hold NUL.
NUL_REPLACEMENT = "\u2400"  # SYMBOL FOR NULL, so the reader still sees that one was there
#: What a lone surrogate becomes: it has no UTF-8 encoding, so no driver can send it.
SURROGATE_REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

#: What the new summary keeps and drops; shared by the summary-only and the fold's requests.
SUMMARY_RULES = """\
Keep confirmed facts, the user's preferences and constraints, decisions and their reasons, tool \
results that still matter (names, numbers, identifiers), open tasks and questions, errors being \
handled and where they stand. Drop pleasantries, small talk and whatever was superseded. Invent \
nothing."""

#: The summariser's system message; ``{limit}`` is the summary's token limit.
INSTRUCTIONS = f"""\
You keep the running summary of a conversation between a user and an AI assistant. You get the \
current summary (possibly empty) and the messages that came after it, one per line; long \
messages are cut.
Write a new summary that replaces the current one and stands on its own: whoever reads only your \
summary must learn everything from the current summary and the new messages that still matters.
{SUMMARY_RULES}
Write compact plain notes in the language of the conversation, at most {{limit}} tokens. Reply \
with the summary only."""


def sanitize_text(text: str) -> str:
    """``text`` as Postgres can store it: NUL shown as ``␀``, lone surrogates as ``�``.

    Surrogate pairs (as a JSON decoder may leave them) are joined into the character they
    encode; only a surrogate without its partner is replaced.
    """
    if not _UNSTORABLE.search(text):
        return text
    text = text.replace("\x00", NUL_REPLACEMENT)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def summary_request(
    previous: str | None,
    messages: Sequence[Message],
    *,
    limit: int,
    previous_is_archive: bool = False,
    chars_per_message: int = 2_000,
) -> list[dict[str, Any]]:
    """The chat request for a new summary: the instructions, then the old summary and messages."""
    transcript = render_transcript(messages, chars_per_message)
    return [
        {"role": "system", "content": INSTRUCTIONS.format(limit=limit)},
        {"role": "user", "content": summary_material(previous, previous_is_archive, transcript)},
    ]


def summary_material(previous: str | None, previous_is_archive: bool, transcript: str) -> str:
    """What a summariser reads: the current summary (labelled), then the new messages."""
    if previous is None:
        current = "Current summary: (none yet)"
    elif previous_is_archive:
        current = f"Current summary (a raw archive of earlier messages):\n{previous}"
    else:
        current = f"Current summary:\n{previous}"
    return f"{current}\n\nNew messages:\n{transcript}"


def render_line(message: Message, tool_names: dict[str, str], *, compact: bool = False) -> str:
    """One message on one line: ``role: text``, tool calls as ``name(arguments)``.

    A tool result is labelled with its tool's name, looked up by call id in ``tool_names``
    (then the message's own ``name``); line breaks inside the message become spaces. With
    ``compact``, a tool result or call arguments that are JSON are sent as ``compact_json``.

    Example:
        ``assistant: Let me look. [calls search({"q": "export"})]``, then
        ``tool search: 3 results ...``.
    """
    if message.role == "tool":
        name = tool_names.get(message.tool_call_id or "") or message.name or "unknown"
        label = f"tool {name}"
    else:
        label = message.role
    text = compact_json(message.text) if compact and message.role == "tool" else message.text
    parts = [one_line(text)]
    if isinstance(message.content, list):
        attachments = sum(1 for part in message.content if part.get("type") != "text")
        if attachments:
            parts.append(f"[{attachments} attachment(s)]")
    if message.tool_calls:
        calls = ", ".join(
            f"{call.function.name}({one_line(arguments)})"
            for call in message.tool_calls
            for arguments in [
                compact_json(call.function.arguments) if compact else call.function.arguments
            ]
        )
        parts.append(f"[calls {calls}]")
    return f"{label}: " + " ".join(part for part in parts if part)


def render_transcript(messages: Sequence[Message], chars_per_message: int) -> str:
    """The messages as lines for a summariser prompt, each cut to ``chars_per_message``."""
    names = _tool_names(messages)
    lines = (cut_to_chars(render_line(message, names), chars_per_message) for message in messages)
    # Sanitized here too: the archive is stored, and the prompt goes through a JSON encoder.
    return sanitize_text("\n".join(lines))


def render_fold_transcript(
    messages: Sequence[Message],
    days: Sequence[date],
    numbers: Mapping[int, int],
    *,
    chars_per_message: int,
    tool_result_chars: int,
) -> str:
    """The messages of a fold as lines, some numbered, dated once per day.

    ``numbers`` maps a message's position to the number its line carries (``[n] user: ...``),
    the lines a reply may cite; the others (tool results, calls, messages already archived)
    are context only. A line ``-- YYYY-MM-DD`` dates the lines after it (``days`` holds each
    message's date), so a date is sent once, not on every line. Tool results are cut to
    ``tool_result_chars``, the other messages to ``chars_per_message``; JSON in tool results
    and call arguments is sent compact (``compact_json``).
    """
    names = _tool_names(messages)
    lines: list[str] = []
    day: date | None = None
    for position, message in enumerate(messages):
        if days[position] != day:
            day = days[position]
            lines.append(f"-- {day.isoformat()}")
        line = render_line(message, names, compact=True)
        number = numbers.get(position)
        if number is not None:
            line = f"[{number}] {line}"
        limit = tool_result_chars if message.role == "tool" else chars_per_message
        lines.append(cut_to_chars(line, limit))
    return sanitize_text("\n".join(lines))


def compact_json(text: str) -> str:
    """A JSON text as the same value with no space between its tokens and no ``\\u`` escapes.

    Tools often answer pretty-printed JSON, with every non-ASCII character escaped (six
    characters, two or three tokens, for each Chinese character): the same value written
    compactly costs far fewer tokens and says the same. Any other text is returned unchanged.
    """
    stripped = text.strip()
    if stripped[:1] not in ("{", "["):
        return text
    try:
        value = json.loads(stripped)
    except ValueError:
        return text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def raw_archive(messages: Sequence[Message], chars_per_line: int) -> str:
    """The messages as plain text, one line each (``role: text``, tool names shown), each cut.

    This is the summary of last resort: bounded per message, written without any model.
    """
    return render_transcript(messages, chars_per_line)


def _tool_names(messages: Sequence[Message]) -> dict[str, str]:
    return {
        call.id: call.function.name for message in messages for call in message.tool_calls or ()
    }
