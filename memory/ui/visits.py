"""What a page handler is given (the inspector's stores, the request's arguments, the visitor)
and the error a handler raises for a request it cannot answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memory.facade import Memory
from memory.ui.layout import Visitor
from storage import MessageStore, SummaryStore
from storage.overview import Overview
from storage.reports import ReportStore

__all__ = ["Inspector", "PageError", "Visit"]


@dataclass(frozen=True, slots=True)
class Inspector:
    """What the pages read from and act through: reads from the stores, every change through
    ``memory`` (the public API, so its checks apply)."""

    memory: Memory
    overview: Overview
    messages: MessageStore
    summaries: SummaryStore
    reports: ReportStore

    @classmethod
    def over(cls, memory: Memory) -> Inspector:
        """The inspector of ``memory``'s database."""
        database = memory.database
        return cls(
            memory,
            Overview(database),
            MessageStore(database),
            SummaryStore(database),
            ReportStore(database),
        )


class PageError(Exception):
    """A request the page cannot answer: shown as a page with ``status`` and ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Visit:
    """One request as a handler sees it: its arguments (query, then form) and its visitor."""

    visitor: Visitor
    query: Mapping[str, str]
    lists: Mapping[str, Sequence[str]] = field(default_factory=dict)
    form: Mapping[str, str] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        """An argument as given (form first), ``None`` when absent or blank."""
        value = self.form.get(name, self.query.get(name))
        return value if value else None

    def required(self, name: str) -> str:
        """An argument that must be there.

        Raises:
            PageError: it is missing (400).
        """
        value = self.text(name)
        if value is None:
            raise PageError(400, f"this page needs the argument {name!r}")
        return value

    def whole(self, name: str, default: int, *, minimum: int = 1) -> int:
        """A whole-number argument, ``default`` when absent.

        Raises:
            PageError: it is not a whole number of at least ``minimum`` (400).
        """
        value = self.text(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise PageError(400, f"{name} must be a whole number, not {value!r}") from None
        if number < minimum:
            raise PageError(400, f"{name} must be at least {minimum}, not {number}")
        return number

    def all(self, name: str) -> list[str]:
        """Every value a repeated argument has (check boxes), blanks left out."""
        return [value for value in self.lists.get(name, ()) if value]
