"""The statements a database handle sends, read back from libpq's trace, and their plans.

Like ``wire_trace`` (the round-trip tests), every connection the pool hands out is traced by
libpq itself, so whatever built a statement (SQLAlchemy, the driver's connection, a CTE) and
whichever code path ran it, it is captured as sent, with the parameters it was bound to. Each
connection has a trace file of its own: psycopg names its prepared statements per connection.
``explain`` then asks the server to plan each captured statement again, with the same
parameters and types, and reads Citus's task count from the plan.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Engine, event, make_url

__all__ = ["Plan", "Sent", "conninfo", "explain", "statements_sent"]

_PARSE = re.compile(r'^ "(?P<name>[^"]*)" "(?P<query>.*)" (?P<count>\d+)(?P<types>( \d+)*)$', re.S)
_BIND_HEAD = re.compile(r'^ "(?P<portal>[^"]*)" "(?P<name>[^"]*)" (?P<rest>.*)$', re.S)
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\t[FB]\t")
_PLANNED = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


@dataclass(frozen=True)
class Sent:
    """One statement as sent: its text, its parameters' types, values and formats."""

    query: str
    types: tuple[int, ...] = ()
    values: tuple[bytes | None, ...] = ()
    formats: tuple[int, ...] = ()

    @property
    def planned(self) -> bool:
        """Whether the server plans it (not BEGIN, COMMIT, SET ...)."""
        return self.query.lstrip().upper().startswith(_PLANNED)


@dataclass
class Plan:
    """A statement's plan: Citus's task counts (none when Citus did not plan it), tables read."""

    sent: Sent
    task_counts: list[int] = field(default_factory=list)
    relations: set[str] = field(default_factory=set)
    #: How Citus runs each ``INSERT ... SELECT`` of the plan ("pull to coordinator", ...).
    insert_selects: list[str] = field(default_factory=list)


def _read_bytes(text: str, at: int, length: int) -> tuple[bytes, int]:
    """Read a value libpq traced as ``'...'`` of ``length`` bytes (non-printables as \\xNN)."""
    assert text[at : at + 2] == " '", text[at : at + 20]
    at += 2
    out = bytearray()
    while len(out) < length:
        escaped = re.match(r"\\x(?:ffffff)?([0-9a-f]{2})", text[at:])
        if escaped:
            out.append(int(escaped.group(1), 16))
            at += escaped.end()
        else:
            out.extend(text[at].encode("latin-1"))
            at += 1
    assert text[at] == "'", text[at - 20 : at + 5]
    return bytes(out), at + 1


def _bind(rest: str) -> tuple[tuple[int, ...], tuple[bytes | None, ...]]:
    """The formats and values of a traced ``Bind`` (after its portal and statement names)."""
    numbers = iter(rest.split(" "))
    count = int(next(numbers))
    formats = tuple(int(next(numbers)) for _ in range(count))
    at = len(" ".join([str(count), *map(str, formats)]))
    match = re.match(r" (\d+)", rest[at:])
    assert match is not None
    params = int(match.group(1))
    at += match.end()
    values: list[bytes | None] = []
    for _ in range(params):
        match = re.match(r" (-?\d+)", rest[at:])
        assert match is not None
        length = int(match.group(1))
        at += match.end()
        if length < 0:
            values.append(None)
            continue
        value, at = _read_bytes(rest, at, length)
        values.append(value)
    if len(formats) == 1:
        formats = formats * params
    return formats, tuple(values)


def _messages(lines: list[str]) -> list[str]:
    """The traced messages: a statement's text may span lines (libpq prints it as it is)."""
    messages: list[str] = []
    for line in lines:
        if _STAMP.match(line) or not messages:
            messages.append(line)
        else:
            messages[-1] += "\n" + line
    return messages


def parse_trace(lines: list[str]) -> list[Sent]:
    """The statements a connection's trace shows it ran, in order."""
    sent: list[Sent] = []
    prepared: dict[str, tuple[str, tuple[int, ...]]] = {}
    for line in _messages(lines):
        parts = line.split("\t", 4)
        if len(parts) < 5 or parts[1] != "F":
            continue
        message, body = parts[3], parts[4]
        if message == "Query":
            sent.append(Sent(body.strip()[1:-1]))
        elif message == "Parse":
            parsed = _PARSE.match(body)
            assert parsed is not None, body[:200]
            types = tuple(int(t) for t in parsed.group("types").split())
            prepared[parsed.group("name")] = (parsed.group("query"), types)
        elif message == "Bind":
            head = _BIND_HEAD.match(body)
            assert head is not None, body[:200]
            query, types = prepared[head.group("name")]
            formats, values = _bind(head.group("rest"))
            sent.append(Sent(query, types, values, formats))
    return sent


@contextmanager
def statements_sent(engine: Engine, folder: Path) -> Iterator[list[Sent]]:
    """Collect every statement ``engine``'s connections send until the block ends."""
    sent: list[Sent] = []
    traced: dict[int, tuple[Any, Any]] = {}

    lock = threading.Lock()

    def start(dbapi_connection: Any, *_: Any) -> None:
        # Two threads check connections out at once (a request's recall starts ahead on its
        # own): without the lock both took the same file, and each cut the other's trace.
        with lock:
            if id(dbapi_connection) not in traced:
                stream = (folder / f"{len(traced)}.trace").open("w")
                dbapi_connection.pgconn.trace(stream.fileno())
                traced[id(dbapi_connection)] = (dbapi_connection, stream)

    # New connections only: psycopg names the statements it prepares per connection, and a
    # connection used before the trace began would bind statements prepared out of its sight.
    engine.dispose()
    event.listen(engine.pool, "checkout", start)
    try:
        yield sent
    finally:
        event.remove(engine.pool, "checkout", start)
        for connection, stream in traced.values():
            if not connection.closed:
                connection.pgconn.untrace()  # flushes what libpq buffered
            stream.close()
        for index in range(len(traced)):
            sent.extend(parse_trace((folder / f"{index}.trace").read_text().splitlines()))


def _walk(node: Any, plan: Plan) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Task Count":
                plan.task_counts.append(int(value))
            elif key == "Relation Name":
                plan.relations.add(str(value))
            elif key == "INSERT/SELECT method":
                plan.insert_selects.append(str(value))
            else:
                _walk(value, plan)
    elif isinstance(node, list):
        for item in node:
            _walk(item, plan)


def conninfo(url: str) -> str:
    """A libpq connection string for a SQLAlchemy URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _literal(value: bytes | None, type_name: str | None) -> str:
    if value is None:
        return f"CAST(NULL AS {type_name})" if type_name else "NULL"
    quoted = "'" + value.decode().replace("'", "''") + "'"
    return f"CAST({quoted} AS {type_name})" if type_name else quoted


def _inlined(statement: Sent, type_names: dict[int, str]) -> str:
    """The statement with its parameters written in as literals of the types they were sent
    with (an untyped one stays untyped, as sent). Citus plans a statement's parameters by
    their values when it runs; ``EXPLAIN`` of a parameterised statement cannot."""
    types = list(statement.types) + [0] * (len(statement.values) - len(statement.types))

    def literal(match: re.Match[str]) -> str:
        index = int(match.group(1)) - 1
        return _literal(statement.values[index], type_names.get(types[index]))

    return re.sub(r"\$(\d+)\b", literal, statement.query)


def _as_text(connection: psycopg.Connection[Any], statement: Sent) -> Sent:
    """The statement with its binary parameters turned into their text form, by the server."""
    if not any(statement.formats):
        return statement
    values = []
    for value, form, oid in zip(statement.values, statement.formats, statement.types, strict=False):
        if value is None or form == 0:
            values.append(value)
            continue
        result = connection.pgconn.exec_params(
            b"SELECT $1::text", [value], param_types=[oid], param_formats=[1]
        )
        assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
        values.append(result.get_value(0, 0))
    return Sent(statement.query, statement.types, tuple(values), ())


def explain(conninfo: str, statements: list[Sent]) -> list[Plan]:
    """Plan each statement the server plans again, as sent (``EXPLAIN``: nothing runs)."""
    plans = []
    with psycopg.connect(conninfo, autocommit=True) as connection:
        type_names = {
            int(oid): str(name)
            for oid, name in connection.execute("SELECT oid, format_type(oid, NULL) FROM pg_type")
        }
        for statement in statements:
            if not statement.planned:
                continue
            query = _inlined(_as_text(connection, statement), type_names)
            try:
                [[tree]] = connection.execute(f"EXPLAIN (FORMAT JSON) {query}").fetchall()
            except psycopg.Error as error:
                raise AssertionError(f"EXPLAIN failed: {error}: {query[:400]}") from error
            plan = Plan(statement)
            _walk(tree, plan)
            plans.append(plan)
    return plans
