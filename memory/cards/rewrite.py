"""Query rewriting: the user's input made self-contained for recall, rules first, then a model.

"What about its export?" after "Knowledge base A supports import" searches memory for
"What about Knowledge base A's export?". The rules resolve a reference when the recent turns
name one clear antecedent; when they cannot decide and a model is configured, the model
rewrites (JSON through the shared ``LLMChain``, in JSON mode where the endpoint takes it); when
both fail the original text is used. The rewrite is for retrieval only: the prompt keeps the
user's message as written.

A request waits for the model only within a ``Deadline``: the call runs on a thread of its own,
and an answer that comes later is dropped, never awaited.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory.cards.antecedents import Reference, candidates, find_references
from memory.cards.prompts import REWRITE_FORMAT, REWRITE_INSTRUCTIONS
from memory.context.cut import cut_to_chars, one_line
from memory.context.messages import Message
from memory.errors import LLMError
from memory.llm import ChainResult, LLMChain, LLMChainFailed, json_text

__all__ = ["Deadline", "DeadlinePassed", "Rewrite", "RewriteMethod", "rewrite_query"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

RewriteMethod = Literal["rules", "llm", "original"]
#: How many recent user and assistant messages are searched for an antecedent (newest first).
RECENT_TURNS = 6
#: Each recent message is cut to this many characters in the model's prompt.
PROMPT_CHARS = 600
#: Model calls a ``Deadline`` lets run at once, late ones included: when that many are still
#: running, the model is slower than the deadline and no new call is started.
MAX_RUNNING_CALLS = 4


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A query for recall and how it was made.

    Attributes:
        query: the self-contained query (the input itself when nothing needed resolving).
        method: ``rules`` (resolved, or nothing to resolve), ``llm``, or ``original`` (a
            reference that neither the rules nor a model could resolve).
        antecedent: what the rules resolved the references to.
        tokens_in: prompt tokens the model calls cost (those answered within the deadline).
        tokens_out: completion tokens the model calls cost.
        calls: chat model calls made (a call abandoned at the deadline included).
        late: the model did not answer within the deadline (the call was abandoned, its
            answer dropped), or too many late calls were still running to start one.
    """

    query: str
    method: RewriteMethod
    antecedent: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    late: bool = False


class DeadlinePassed(LLMError):
    """A ``Deadline``'s call did not return in time; its late answer will be dropped.

    Attributes:
        started: whether the call was started (and abandoned), or not started at all.
    """

    def __init__(self, message: str, started: bool) -> None:
        super().__init__(message)
        self.started = started


class Deadline:
    """The longest a caller waits for a model call, whatever the model does.

    ``run`` starts the call on a thread of its own and waits for it ``seconds`` at most; a call
    not done by then is abandoned: it runs on (its own client timeout ends it) and its answer,
    or its failure, is dropped. Retries inside the call cannot extend the wait. At most
    ``max_running`` calls run at once, abandoned ones included, so a model that hangs costs a
    bounded number of threads; while that many run, no call is started.

    Args:
        seconds: the longest wait.
        max_running: the most calls running at once.
    """

    def __init__(self, seconds: float, *, max_running: int = MAX_RUNNING_CALLS) -> None:
        if seconds <= 0 or max_running < 1:
            raise ValueError(f"need seconds > 0 and max_running >= 1, got {seconds}, {max_running}")
        self.seconds = seconds
        self._running = max_running
        self._slots = threading.BoundedSemaphore(max_running)

    def run(self, call: Callable[[], T]) -> T:
        """What ``call`` returns, if it returns within the deadline.

        Raises:
            DeadlinePassed: the call was abandoned at the deadline, or not started.
            Whatever ``call`` raised, when it raised in time.
        """
        if not self._slots.acquire(blocking=False):
            raise DeadlinePassed(f"{self._running} calls still running: none started", False)
        done: Future[T] = Future()

        def work() -> None:
            try:
                done.set_result(call())
            # Not swallowed: handed to the caller, who raises it if it waits still.
            except BaseException as error:  # noqa: BLE001
                done.set_exception(error)
            finally:
                self._slots.release()

        threading.Thread(target=work, name="stratamem-deadline", daemon=True).start()
        try:
            return done.result(timeout=self.seconds)
        except TimeoutError:
            raise DeadlinePassed(f"no answer within {self.seconds * 1000:.0f} ms", True) from None


class _RewriteReply(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    query: str = Field(min_length=1)


def rewrite_query(
    input: str,
    recent_messages: Sequence[Message],
    *,
    chat: LLMChain | None = None,
    deadline: Deadline | None = None,
) -> Rewrite:
    """Rewrite ``input`` into a query that stands alone, for recall.

    Args:
        input: the user's latest message.
        recent_messages: the messages before it, oldest first; user and assistant text is read.
        chat: the chain to ask when the rules cannot decide; ``None`` for rules only.
        deadline: the longest the model is waited for; ``None`` waits for the chain to end.

    Returns:
        The rewrite; never raises because a model failed or was late.
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
    model = chat

    def ask() -> ChainResult[str]:
        return model.run(
            _request(input, turns),
            lambda text, model: _accept(text, input, model),
            max_tokens=max(64, len(input) * 2),
            response_format=REWRITE_FORMAT,
        )

    try:
        result = ask() if deadline is None else deadline.run(ask)
    except DeadlinePassed as late:
        logger.info("query rewrite: %s; the input is searched as written", late)
        return Rewrite(input, "original", calls=int(late.started), late=True)
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
        query = _RewriteReply.model_validate_json(json_text(text, model)).query
    except ValidationError as error:
        raise LLMError(f"{model}: malformed rewrite reply: {error.errors()[0]['msg']}") from error
    # A rewrite resolves references; one many times longer than the input is an answer.
    if len(query) > 3 * len(input) + 200:
        raise LLMError(f"{model}: the rewrite is {len(query)} characters for {len(input)}")
    return query
