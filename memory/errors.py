"""The errors raised by the ``memory`` layer.

::

    StratamemError                  base of every error stratamem raises on purpose (defined in
    │                               storage.errors, the lowest layer, as the root of storage's
    │                               and retrieval's errors too)
    ├── InvalidHistoryError         (also ValueError) a message list breaks the chat structure
    │   └── ToolCallInterruptedError    a result for a call that was closed as interrupted
    ├── RecordConflictError         (also ValueError) a client id reused with other content, or
    │                               a batch mixing stored and new messages; nothing stored
    ├── ContextOverflowError        (also ValueError) the mandatory part cannot fit the budget
    ├── BudgetError                 (also ValueError) a budget or model table lookup is impossible
    ├── ConfigurationError          settings that cannot work together
    ├── PinBudgetError              (also ValueError) a pin would exceed the pin budget
    ├── storage.InvalidInputError   (also ValueError) input that can never be stored as given
    │   └── InvalidArgumentError    an argument a ``Memory`` method refuses by its own check
    │                               (a query that is not text, a negative k, one string for
    │                               a list, a blank text, two targets for forget); nothing
    │                               read or stored
    ├── CardNotFoundError           (also LookupError) the user has no card with this id
    ├── ExportFormatError           (also ValueError) a line of an export file is not one an
    │                               import can take (it names the line); nothing imported
    └── LLMError                    a chat model call failed (the summariser degrades on it)
        └── ReplyFormatError        the reply is not the JSON asked for at all (prose)

Errors of the storage layer (``storage.StorageError`` and its children) and of retrieval
(``retrieval.RetrievalError``) pass through unchanged; all are ``StratamemError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

# The root lives in the lowest layer so every layer's errors share it. Importing storage.errors
# loads that module alone (storage's names load lazily), so memory.context stays pure.
from storage.errors import InvalidInputError, StratamemError

__all__ = [
    "BudgetError",
    "CardNotFoundError",
    "ConfigurationError",
    "ContextOverflowError",
    "ExportFormatError",
    "InvalidArgumentError",
    "InvalidHistoryError",
    "LLMError",
    "PinBudgetError",
    "Problem",
    "RecordConflictError",
    "ReplyFormatError",
    "StratamemError",
    "ToolCallInterruptedError",
]


def _message_at(index: int) -> str:
    return f"message {index}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One structural problem of a message list, as data.

    Attributes:
        index: the message the problem is about (a position in the list checked); ``None`` when
            it is about no one message.
        what: what is wrong; ``{related}`` in it stands for the message named by ``related``.
        related: another message the problem refers to (an earlier call, a duplicate).
    """

    index: int | None
    what: str
    related: int | None = None

    def describe(self, name: Callable[[int], str] = _message_at) -> str:
        """The problem as one sentence, messages named by ``name`` (``message 3`` by default)."""
        what = self.what
        if self.related is not None:
            what = what.replace("{related}", name(self.related))
        return what if self.index is None else f"{name(self.index)}: {what}"

    def __str__(self) -> str:
        return self.describe()


class InvalidHistoryError(StratamemError, ValueError):
    """A message list that no chat API would accept.

    Attributes:
        problems: the problems as records; ``str(problem)`` is one sentence naming the message.
    """

    def __init__(self, problems: Iterable[Problem | str]) -> None:
        self.problems = [
            problem if isinstance(problem, Problem) else Problem(None, problem)
            for problem in problems
        ]
        listed = _first_few([str(problem) for problem in self.problems], "problems")
        super().__init__(f"invalid message history ({len(self.problems)} problem(s)): {listed}")


class ToolCallInterruptedError(InvalidHistoryError):
    """A tool result for a call that was already closed with an "interrupted: no result" result.

    A new user input while calls were open closed them (see ``Memory.close_open_calls``); the
    real result arrived too late and cannot be recorded.

    Attributes:
        call_ids: the calls whose results came too late.
    """

    def __init__(self, problems: list[str], call_ids: list[str]) -> None:
        super().__init__(problems)
        self.call_ids = list(call_ids)


class RecordConflictError(StratamemError, ValueError):
    """A batch that is neither new nor an exact replay of stored messages; nothing was stored.

    A client ``id`` is an idempotency key: recording a batch whose every id is already stored
    with the same content is a no-op. Reusing an id with other content, or a batch in which some
    messages are stored and others are not, is this error.

    Attributes:
        conflicts: one sentence per conflicting message, naming its client id and stored seq.
    """

    def __init__(self, conflicts: list[str]) -> None:
        self.conflicts = list(conflicts)
        listed = _first_few(self.conflicts, "conflicts")
        super().__init__(f"record conflicts with stored messages: {listed}")


class ContextOverflowError(StratamemError, ValueError):
    """The parts that are never dropped do not fit the budget.

    Attributes:
        required: tokens of the mandatory part after every possible cut.
        budget: tokens available.
    """

    def __init__(self, required: int, budget: int, detail: str = "") -> None:
        self.required = required
        self.budget = budget
        suffix = f" ({detail})" if detail else ""
        super().__init__(
            f"the mandatory context needs {required} tokens but the budget is {budget}{suffix}"
        )


class BudgetError(StratamemError, ValueError):
    """A token budget that cannot be planned (unknown model, reserve larger than the window)."""


class ConfigurationError(StratamemError):
    """Settings that cannot work together."""


class PinBudgetError(StratamemError, ValueError):
    """A pin that would take the user's pinned cards over the pin budget (in tokens)."""

    def __init__(self, required: int, budget: int) -> None:
        self.required = required
        self.budget = budget
        super().__init__(
            f"pinned cards would take {required} tokens but the pin budget is {budget} "
            "(cards.pin_budget_ratio of the history budget): unpin a card or raise the ratio"
        )


class InvalidArgumentError(InvalidInputError):
    """An argument a ``Memory`` method refuses by its own check; nothing was read or stored.

    A subclass of ``storage.InvalidInputError`` (what these checks raised before) and so of
    ``ValueError``: code that catches either still catches it.
    """


class CardNotFoundError(StratamemError, LookupError):
    """The user has no card with this id (another user's card is never found)."""


class ExportFormatError(StratamemError, ValueError):
    """A line of an export is malformed or refers to nothing before it; nothing was imported.

    Attributes:
        line: The line's number (from 1).
    """

    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"line {line}: {what}")
        self.line = line


class LLMError(StratamemError):
    """A chat model call failed: network, timeout, HTTP error, or an empty or malformed reply.

    The summariser catches it and degrades (retry, fallback model, raw archive); it never
    reaches the caller of a request.
    """


class ReplyFormatError(LLMError):
    """A reply is not in the format asked for at all: prose where JSON was asked.

    A model that answers a JSON prompt in prose does so again: an ``LLMChain`` does not ask the
    same model again (it goes on to the fallback model), and the caller falls back to what needs
    no JSON (the plain-text summary, the rules).
    """


#: How many problems or conflicts an error's message lists; its attribute holds them all.
_LISTED = 10


def _first_few(sentences: list[str], attribute: str) -> str:
    """The first ``_LISTED`` sentences joined, and how many more the ``attribute`` holds: a
    10,000-message batch breaks in 10,000 places, and a message of all of them (700 kB, seen)
    buries the first in a log or an HTTP error."""
    shown = "; ".join(sentences[:_LISTED])
    hidden = len(sentences) - _LISTED
    return shown if hidden <= 0 else f"{shown}; and {hidden} more (see .{attribute})"
