"""Query rewriting: the user's input made self-contained for recall, rules first, then a model.

"What about its export?" after "Knowledge base A supports import" searches memory for
"What about Knowledge base A's export?". The rules resolve a reference when the recent turns
name one clear antecedent; when they cannot decide and a model is configured, the model
rewrites (JSON through the shared ``LLMChain``, in JSON mode where the endpoint takes it); when
both fail the original text is used. The rewrite is for retrieval only: the prompt keeps the
user's message as written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory.cards.antecedents import Reference, candidates, find_references
from memory.cards.prompts import REWRITE_FORMAT, REWRITE_INSTRUCTIONS
from memory.context.cut import cut_to_chars, one_line
from memory.context.messages import Message
from memory.errors import LLMError
from memory.llm import LLMChain, LLMChainFailed, json_text

__all__ = ["Rewrite", "RewriteMethod", "rewrite_query"]

logger = logging.getLogger(__name__)

RewriteMethod = Literal["rules", "llm", "original"]
#: How many recent user and assistant messages are searched for an antecedent (newest first).
RECENT_TURNS = 6
#: Each recent message is cut to this many characters in the model's prompt.
PROMPT_CHARS = 600


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A query for recall and how it was made.

    Attributes:
        query: the self-contained query (the input itself when nothing needed resolving).
        method: ``rules`` (resolved, or nothing to resolve), ``llm``, or ``original`` (a
            reference that neither the rules nor a model could resolve).
        antecedent: what the rules resolved the references to.
        tokens_in: prompt tokens the model calls cost.
        tokens_out: completion tokens the model calls cost.
        calls: chat model calls made.
    """

    query: str
    method: RewriteMethod
    antecedent: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    query: str = Field(min_length=1)


def rewrite_query(
    input: str, recent_messages: Sequence[Message], *, chat: LLMChain | None = None
) -> Rewrite:
    """Rewrite ``input`` into a query that stands alone, for recall.

    Args:
        input: the user's latest message.
        recent_messages: the messages before it, oldest first; user and assistant text is read.
        chat: the chain to ask when the rules cannot decide; ``None`` for rules only.

    Returns:
        The rewrite; never raises because a model failed.
    """
    references = find_references(input)
    if not references:
        return Rewrite(input, "rules")
    turns = [
        message.text
        for message in reversed(recent_messages)
        if message.role in ("user", "assistant") and message.text.strip()
    ][:RECENT_TURNS]
    antecedent = _antecedent(input, references, turns)
    if antecedent is not None:
        return Rewrite(_substitute(input, references, antecedent), "rules", antecedent)
    if chat is None:
        return Rewrite(input, "original")
    try:
        result = chat.run(
            _request(input, turns),
            lambda text, model: _accept(text, input, model),
            max_tokens=max(64, len(input) * 2),
            response_format=REWRITE_FORMAT,
        )
    except LLMChainFailed as failure:
        logger.warning("query rewrite kept the original text: %s", failure)
        return Rewrite(input, "original", None, failure.tokens_in, failure.tokens_out,
                       failure.attempts)  # fmt: skip
    return Rewrite(result.value, "llm", None, result.tokens_in, result.tokens_out,
                   result.attempts)  # fmt: skip


def _antecedent(input: str, references: list[Reference], turns: list[str]) -> str | None:
    """The one thing the recent turns make the references mean, or ``None`` when unsure."""
    said = input.casefold()
    found = [[c for c in candidates(turn) if c.term.casefold() not in said] for turn in turns]
    heads = [reference.head for reference in references if reference.head]
    if heads:  # "那个方案": the newest thing whose name ends in 方案
        for turn in found:
            named = [c.term for c in turn if c.term.endswith(heads[0])]
            if len(named) == 1:
                return named[0]
    for turn in found:
        if not turn:
            continue
        if len(turn) == 1:
            return turn[0].term
        leading = [c for c in turn if c.leads]
        # Several things named: the subject of the sentence is the likely antecedent, but
        # only when exactly one of them stands there; otherwise it is the model's call.
        return leading[0].term if len(leading) == 1 else None
    return None


def _substitute(input: str, references: list[Reference], antecedent: str) -> str:
    text = input
    for reference in reversed(references):
        said = text[reference.start : reference.end]
        if reference.form == "possessive":
            words = antecedent + ("'" if antecedent.endswith("s") else "'s")
        elif reference.form == "is":
            words = f"{antecedent} is"
        elif reference.form == "chinese":
            words = antecedent
            if reference.head and not antecedent.endswith(reference.head):
                words += reference.head  # 那个方案 with Redis: Redis方案
            if said.endswith("的") and not reference.head:
                words += "的"  # 它的导出 -> 知识库A的导出
        else:
            words = antecedent
        text = text[: reference.start] + words + text[reference.end :]
    return text


def _request(input: str, turns: list[str]) -> list[dict[str, Any]]:
    recent = "\n".join(cut_to_chars(one_line(turn), PROMPT_CHARS) for turn in reversed(turns))
    return [
        {"role": "system", "content": REWRITE_INSTRUCTIONS},
        {
            "role": "user",
            "content": f"Recent conversation:\n{recent or '(none)'}\n\nLatest message:\n{input}",
        },
    ]


def _accept(text: str, input: str, model: str) -> str:
    try:
        query = _Reply.model_validate_json(json_text(text, model)).query
    except ValidationError as error:
        raise LLMError(f"{model}: malformed rewrite reply: {error.errors()[0]['msg']}") from error
    # A rewrite resolves references; one many times longer than the input is an answer.
    if len(query) > 3 * len(input) + 200:
        raise LLMError(f"{model}: the rewrite is {len(query)} characters for {len(input)}")
    return query
