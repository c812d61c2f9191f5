"""libpq's own trace of the connections a pool hands out: what was sent and received.

Counts round trips and statements on the wire, whichever way a statement was run (SQLAlchemy
or the driver's connection itself, ``storage.driver``), so the count does not depend on the
machine or on the library's layers. Used by the round-trip tests and by ``benchmarks/proxy.py``
(which loads this file by path).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

__all__ = ["WireTrace", "wire_trace"]


@dataclass
class WireTrace:
    """The messages libpq exchanged with the server while the trace was on."""

    lines: list[str] = field(default_factory=list)

    @property
    def round_trips(self) -> int:
        """Exchanges that ran statements, ended by the server's ``ReadyForQuery``.

        A trip that only prepared a statement is not counted: psycopg prepares a statement on
        its fifth run on a connection (a ``Parse`` of a named statement, then ``Sync``), once,
        so counting it would make a count depend on what ran on the connection before.
        """
        return self._trips() - self.preparations

    @property
    def preparations(self) -> int:
        """Trips that only prepared a named statement (``Parse "_pg3_N"`` then ``Sync``)."""
        sent = [line.split("\t")[3] for line in self.lines if re.search(r"\tF\t\d+\t", line)]
        return sum(
            1
            for index, message in enumerate(sent)
            if message == "Parse" and index + 1 < len(sent) and sent[index + 1] == "Sync"
        )

    def _trips(self) -> int:
        return sum(1 for line in self.lines if "\tReadyForQuery\t" in line)

    @property
    def statements(self) -> int:
        """Statements the client ran: each ``Execute`` (extended protocol) or ``Query``.

        Preparing a statement (``Parse``) is not running it.
        """
        return sum(1 for line in self.lines if re.search(r"\tF\t\d+\t(Execute|Query)\b", line))


@contextmanager
def wire_trace(engine: Engine, path: Path) -> Iterator[WireTrace]:
    """Trace every connection ``engine``'s pool hands out until the block ends."""
    trace = WireTrace()
    traced: list[Any] = []
    with path.open("w") as stream:

        def start(dbapi_connection: Any, *_: Any) -> None:
            dbapi_connection.pgconn.trace(stream.fileno())
            traced.append(dbapi_connection)

        event.listen(engine.pool, "checkout", start)
        try:
            yield trace
        finally:
            event.remove(engine.pool, "checkout", start)
            for connection in traced:
                if not connection.closed:
                    connection.pgconn.untrace()  # flushes what libpq buffered
    trace.lines = path.read_text().splitlines()
