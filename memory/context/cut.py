"""Cutting oversized text: one marker format, one token-bounded cutter, one-line previews.

Every cut stratamem makes is visible: the kept text (its head, its tail, or both) stands next to
a marker that says how much was cut, e.g. ``[… 1200 tokens cut by stratamem …]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from memory.context.tokens import TokenCounter

__all__ = [
    "Keep",
    "cut_marker",
    "cut_to_chars",
    "cut_to_fit",
    "cut_to_tokens",
    "one_line",
    "preview",
]

#: Which part of a text a cut keeps: its start, its end, or both around the marker.
Keep = Literal["head", "tail", "both"]


def cut_marker(amount: int, unit: Literal["tokens", "characters"] = "tokens") -> str:
    """The visible marker left where ``amount`` tokens (or characters) of a text were cut."""
    return f"[… {amount} {unit} cut by stratamem …]"


def cut_to_tokens(
    text: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    keep: Keep,
    text_tokens: int | None = None,
) -> str | None:
    """``text`` cut to at most ``max_tokens`` tokens, the marker included.

    The kept part is a head (a line or sentence end is preferred when it keeps four fifths of
    it), a tail, or a head and a tail of about equal tokens around the marker, which counts the
    tokens cut. Sizes are estimated from the text's characters per token and shrunk by the
    measured overshoot, so a 1 MB text costs one encode plus a few of about the size that fits.

    Args:
        text: the text to cut.
        max_tokens: the most tokens the result may have.
        counter: counts the tokens.
        keep: which part of the text to keep.
        text_tokens: the tokens of ``text`` when the caller knows them (saves an encode).

    Returns:
        ``text`` when it fits; else a marked cut that fits; ``None`` when not even the marker
        fits.
    """
    total = counter.count_text(text) if text_tokens is None else text_tokens
    if total <= max_tokens:
        return text
    # The marker never counts more than when it says everything was cut.
    room = max_tokens - counter.count_text(cut_marker(total)) - 2  # and two line breaks
    chars_per_token = len(text) / max(total, 1)
    for _ in range(_FIT_ROUNDS):
        if room < 0:
            return None
        head, tail = _kept_parts(text, room, chars_per_token, counter, keep)
        kept = counter.count_text(head) + counter.count_text(tail)
        cut = "\n".join(part for part in (head, cut_marker(total - kept), tail) if part)
        overshoot = counter.count_text(cut) - max_tokens
        if overshoot <= 0:
            return _at_a_break(head, cut, max_tokens, total, counter) if keep == "head" else cut
        room -= overshoot
    return None


#: Rounds of "measure, then shrink by the overshoot" before giving up.
_FIT_ROUNDS = 8


def _kept_parts(
    text: str, room: int, chars_per_token: float, counter: TokenCounter, keep: Keep
) -> tuple[str, str]:
    """The head and tail of ``text`` (one may be empty) within about ``room`` tokens together."""
    if keep == "head":
        return text[: _fit_chars(text, room, chars_per_token, counter, from_end=False)], ""
    if keep == "tail":
        chars = _fit_chars(text, room, chars_per_token, counter, from_end=True)
        return "", text[len(text) - chars :] if chars else ""
    head_room = (room + 1) // 2
    head = _fit_chars(text, head_room, chars_per_token, counter, from_end=False)
    tail = _fit_chars(text, room - head_room, chars_per_token, counter, from_end=True)
    # A tiny text estimated badly could make the two overlap; the head wins.
    tail = min(tail, len(text) - head)
    return text[:head], text[len(text) - tail :] if tail else ""


def _fit_chars(
    text: str, room: int, chars_per_token: float, counter: TokenCounter, *, from_end: bool
) -> int:
    """How many characters from one end of ``text`` fit ``room`` tokens (never more than fit)."""
    if room <= 0:
        return 0
    chars = min(len(text), max(1, int(room * chars_per_token)))
    for _ in range(_FIT_ROUNDS):
        piece = text[len(text) - chars :] if from_end else text[:chars]
        tokens = counter.count_text(piece)
        if tokens <= room:
            return chars
        # Shrink in proportion to the overshoot; tokens never exceed characters here.
        chars = int(chars * room / tokens)
        if chars == 0:
            return 0
    return 0


def _at_a_break(head: str, cut: str, max_tokens: int, total: int, counter: TokenCounter) -> str:
    """The head cut at a line end, then a sentence end, then a space, when one is near."""
    for separator in ("\n", ". ", " "):
        at = head.rfind(separator)
        shorter = head[: at + len(separator)].rstrip()
        if at < len(head) * 4 // 5 or not shorter:
            continue
        candidate = f"{shorter}\n{cut_marker(total - counter.count_text(shorter))}"
        # Token counts are not strictly monotonic in the length: check the shorter cut too.
        if counter.count_text(candidate) <= max_tokens:
            return candidate
    return cut


def cut_to_fit(
    text: str,
    max_tokens: int,
    measure: Callable[[str], int],
    counter: TokenCounter,
    *,
    keep: Keep,
    text_tokens: int | None = None,
) -> str | None:
    """``text`` cut so that ``measure`` of the result is at most ``max_tokens``.

    For text inside something bigger (a message with its frame, a labelled summary):
    ``measure`` costs the whole, and the text's own budget shrinks by the measured overshoot.

    Returns:
        ``text`` when it fits; else a marked cut (see ``cut_to_tokens``) that fits; ``None``
        when not even the marker fits.
    """
    if measure(text) <= max_tokens:
        return text
    budget = max_tokens - (measure("") if text else 0)
    for _ in range(_FIT_ROUNDS):
        cut = cut_to_tokens(text, budget, counter, keep=keep, text_tokens=text_tokens)
        if cut is None:
            return None
        overshoot = measure(cut) - max_tokens
        if overshoot <= 0:
            return cut
        budget -= overshoot
    return None


def cut_to_chars(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, its head kept before the marker."""
    if len(text) <= limit:
        return text
    kept = max(limit - len(cut_marker(len(text), "characters")) - 1, 0)
    return f"{text[:kept].rstrip()} {cut_marker(len(text) - kept, 'characters')}"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, line breaks included, made one space."""
    return " ".join(text.split())


def preview(text: str, limit: int = 40) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    line = one_line(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"
