"""Export and import: everything of a user as JSON Lines (``memory.transfer.format``), and back.

``export_lines`` reads the user in one snapshot and writes no embedding; ``import_lines`` reads
the whole file first (a malformed line is an ``ExportFormatError`` naming it, and nothing is
stored), embeds the cards and items with this memory's embedder, and stores everything in one
transaction (``storage.imports``): all of it or nothing. Messages get new ids; each card's
sources become the ids of the imported messages it was made from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from memory.context.tokens import TokenCounter
from memory.errors import ConfigurationError, ExportFormatError, InvalidHistoryError
from memory.session.incoming import parse_input
from memory.transfer.format import (
    VERSION,
    CardLine,
    Header,
    ItemLine,
    MessageLine,
    SessionLine,
    SummaryLine,
    line_adapter,
)
from retrieval import Embedder, term_frequencies
from storage import Database, InvalidInputError, NewCard, NewMessage
from storage.exports import ExportedCard, ExportedSession, read_user
from storage.imports import CardImport, ItemImport, SessionImport, SummaryImport, store_user
from storage.inputs import check_id, check_text
from storage.items.store import ItemIndexing, check_item_path

__all__ = ["Imported", "export_lines", "import_lines"]

# Cards are embedded this many at a time: bounded memory, whatever the export's size.
_EMBED_BATCH = 256


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import stored, by kind.

    Attributes:
        user_id: The user it went into.
        merged_cards: Cards the user already had (same type and text), left as they were.
    """

    user_id: str
    sessions: int
    messages: int
    summaries: int
    cards: int
    items: int
    merged_cards: int = 0

    def describe(self) -> str:
        """One line for people, e.g. ``2 sessions, 40 messages, 1 summary, 12 cards, 0 items``."""
        counts = (
            (self.sessions, "session", "sessions"),
            (self.messages, "message", "messages"),
            (self.summaries, "summary", "summaries"),
            (self.cards, "card", "cards"),
            (self.items, "item", "items"),
        )
        said = ", ".join(f"{n:,} {one if n == 1 else many}" for n, one, many in counts)
        if self.merged_cards:
            said += f" ({self.merged_cards:,} cards the user had already, kept as they were)"
        return said


def export_lines(database: Database, user_id: str) -> Iterator[str]:
    """Yield the user's export, one JSON line (without its newline) at a time."""
    check_id("user_id", user_id)
    yield _dump(Header(version=VERSION, user_id=user_id, exported_at=datetime.now(UTC)))
    for found in read_user(database, user_id):
        if isinstance(found, ExportedSession):
            yield from _session_lines(found)
        elif isinstance(found, ExportedCard):
            card = found.card
            yield _dump(
                CardLine(
                    ref=card.id,
                    type=card.type,
                    text=card.text,
                    topic=card.topic,
                    tags=card.tags,
                    session_id=card.session_id,
                    sources=found.sources,
                    source_client_ids=card.source_client_ids,
                    observed_at=card.observed_at,
                    occurred_at=card.occurred_at,
                    valid_from=card.valid_from,
                    valid_to=card.valid_to,
                    superseded_by=card.superseded_by,
                    pinned=card.pinned,
                    subject=card.subject,
                    attribute=card.attribute,
                    created_at=card.created_at,
                )
            )
        else:
            yield _dump(
                ItemLine(
                    namespace=list(found.namespace),
                    key=found.key,
                    value=found.value,
                    texts=found.texts,
                    created_at=found.created_at,
                    updated_at=found.updated_at,
                )
            )


def _session_lines(session: ExportedSession) -> Iterator[str]:
    yield _dump(
        SessionLine(
            session_id=session.session_id,
            created_at=session.created_at,
            archived_seq=session.archived_seq,
        )
    )
    for message in session.messages:
        yield _dump(
            MessageLine(
                session_id=session.session_id,
                seq=message.seq,
                id=message.client_id,
                message=message.payload,
                metadata=message.metadata,
                created_at=message.created_at,
            )
        )
    summary = session.summary
    if summary is not None:
        yield _dump(
            SummaryLine(
                session_id=session.session_id,
                content=summary.content,
                kind=summary.kind,
                boundary_seq=summary.boundary_seq,
                covered=summary.covered,
                version=summary.version,
                updated_at=summary.updated_at,
            )
        )


def _dump(line: Header | SessionLine | MessageLine | SummaryLine | CardLine | ItemLine) -> str:
    # Text stays readable (UTF-8, not escaped); NULs and line breaks inside strings are
    # escaped by JSON itself, so a record never spans lines.
    return line.model_dump_json()


@dataclass
class _Parsed:
    """An export read whole, before anything is embedded or stored."""

    user_id: str
    sessions: list[SessionImport] = field(default_factory=list)
    cards: list[CardLine] = field(default_factory=list)
    items: list[ItemLine] = field(default_factory=list)


def import_lines(
    lines: Iterable[str],
    *,
    database: Database,
    counter: TokenCounter,
    embedder: Embedder | None,
    index_items: Callable[[Sequence[Mapping[str, str]]], list[ItemIndexing | None]] | None,
    user_id: str | None = None,
    merge: bool = False,
) -> Imported:
    """Store an export into its user (or ``user_id``), in one transaction.

    Raises:
        ExportFormatError: A line is not JSON, not a record of the format, or refers to
            nothing before it (its number is named); nothing is stored.
        storage.ImportConflictError: The user has data and ``merge`` is off, or already has
            one of the sessions; nothing is stored.
        ConfigurationError: The export has cards or items and long-term memory is off.
    """
    parsed = _parse(lines, counter, user_id)
    if (parsed.cards or parsed.items) and (embedder is None or index_items is None):
        raise ConfigurationError(
            "the export has cards or items: importing them needs long-term memory "
            "(cards.enabled=True) to embed them"
        )
    cards = _embedded_cards(parsed.cards, embedder) if embedder is not None else []
    indexings = index_items([item.texts for item in parsed.items]) if index_items else []
    items = [
        ItemImport(
            namespace=tuple(item.namespace),
            key=item.key,
            value=item.value,
            indexing=indexing,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )
        for item, indexing in zip(parsed.items, indexings, strict=True)
    ]
    counts = store_user(database, parsed.user_id, parsed.sessions, cards, items, merge=merge)
    return Imported(
        user_id=parsed.user_id,
        sessions=counts.sessions,
        messages=counts.messages,
        summaries=counts.summaries,
        cards=counts.cards,
        items=counts.items,
        merged_cards=counts.merged_cards,
    )


def _parse(lines: Iterable[str], counter: TokenCounter, user_id: str | None) -> _Parsed:
    parsed: _Parsed | None = None
    current: SessionLine | None = None
    messages: list[NewMessage] = []
    summary: SummaryImport | None = None
    sessions: dict[str, SessionImport] = {}
    sources: set[tuple[str, int]] = set()
    refs: dict[int, int] = {}  # a card's ref -> the line it is on

    def close_session() -> None:
        if current is not None and parsed is not None:
            sessions[current.session_id] = SessionImport(
                current.session_id, current.created_at, list(messages), summary,
                current.archived_seq,
            )  # fmt: skip

    number = 0
    for number, raw in enumerate(_decoded(lines), start=1):
        if not raw.strip():
            continue
        try:
            line = line_adapter.validate_json(raw)
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(map(str, problem["loc"]))
            raise ExportFormatError(
                number, f"{where + ': ' if where else ''}{problem['msg']}"
            ) from None
        if parsed is None:
            if not isinstance(line, Header):
                raise ExportFormatError(number, "the first record must be the header")
            if line.version != VERSION:
                raise ExportFormatError(
                    number, f"format version {line.version} is not {VERSION}, the one read here"
                )
            target = user_id if user_id is not None else line.user_id
            _check(number, check_id, "user_id", target)
            parsed = _Parsed(target)
            continue
        if isinstance(line, Header):
            raise ExportFormatError(number, "a second header")
        if isinstance(line, SessionLine):
            close_session()
            _check(number, check_id, "session_id", line.session_id)
            if line.session_id in sessions or (current and current.session_id == line.session_id):
                raise ExportFormatError(number, "a session that came before")
            current, messages, summary = line, [], None
        elif isinstance(line, MessageLine):
            if current is None or line.session_id != current.session_id:
                raise ExportFormatError(number, "a message outside its session's lines")
            if line.seq != len(messages) + 1 or summary is not None:
                raise ExportFormatError(
                    number, f"message seq {line.seq} is not {len(messages) + 1}"
                )
            messages.append(_message(number, line, counter))
            sources.add((line.session_id, line.seq))
        elif isinstance(line, SummaryLine):
            if current is None or line.session_id != current.session_id or summary is not None:
                raise ExportFormatError(number, "a summary outside its session's lines")
            if line.boundary_seq > len(messages):
                raise ExportFormatError(number, "the summary covers messages the session lacks")
            _check(number, check_text, "summary", line.content)
            summary = SummaryImport(
                line.content, line.kind, line.boundary_seq, line.covered, line.version,
                line.updated_at,
            )  # fmt: skip
        elif isinstance(line, CardLine):
            if line.ref in refs:
                raise ExportFormatError(number, f"card ref {line.ref} appears twice")
            missing = [source for source in line.sources if tuple(source) not in sources]
            if missing:
                raise ExportFormatError(
                    number, f"the card's source {list(missing[0])} is no message above"
                )
            refs[line.ref] = number
            parsed.cards.append(line)
        else:
            _check(number, check_item_path, line.namespace, line.key)
            parsed.items.append(line)
    if parsed is None:
        raise ExportFormatError(max(number, 1), "no header: this is not a stratamem export")
    close_session()
    parsed.sessions = list(sessions.values())
    for card in parsed.cards:
        if card.superseded_by is not None and card.superseded_by not in refs:
            raise ExportFormatError(
                refs[card.ref], f"superseded by card {card.superseded_by}, which is not in the file"
            )
    return parsed


def _decoded(lines: Iterable[str]) -> Iterator[str]:
    """The lines; a file that is not UTF-8 is an error naming the line it fails on."""
    number = 0
    iterator = iter(lines)
    while True:
        number += 1
        try:
            yield next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError:
            raise ExportFormatError(number, "not UTF-8 text") from None


def _message(number: int, line: MessageLine, counter: TokenCounter) -> NewMessage:
    given = {**line.message, "id": line.id, "metadata": line.metadata, "timestamp": line.created_at}
    try:
        message, client_id, metadata, timestamp = parse_input(line.seq - 1, given)
    except InvalidHistoryError as error:
        raise ExportFormatError(number, str(error)) from None
    return NewMessage(
        payload=message.to_openai(),
        role=message.role,
        tokens=counter.count_message(message),
        client_id=client_id,
        metadata=metadata,
        created_at=timestamp,
    )


def _check(number: int, check: Callable[..., object], *args: object) -> None:
    """Run a storage check on a line's field; its error names the line."""
    try:
        check(*args)
    except InvalidInputError as error:
        raise ExportFormatError(number, str(error)) from None


def _embedded_cards(lines: Sequence[CardLine], embedder: Embedder) -> list[CardImport]:
    position = {line.ref: index for index, line in enumerate(lines)}
    vectors: list[list[float]] = []
    for start in range(0, len(lines), _EMBED_BATCH):
        vectors += embedder.embed([line.text for line in lines[start : start + _EMBED_BATCH]])
    return [
        CardImport(
            card=NewCard(
                type=line.type,
                text=line.text,
                embedding=vector,
                terms=term_frequencies(line.text),
                topic=line.topic,
                tags=line.tags,
                session_id=line.session_id,
                source_client_ids=line.source_client_ids,
                observed_at=line.observed_at,
                occurred_at=line.occurred_at,
                pinned=line.pinned,
                subject=line.subject,
                attribute=line.attribute,
            ),
            sources=[(session_id, seq) for session_id, seq in line.sources],
            valid_from=line.valid_from,
            valid_to=line.valid_to,
            superseded_by=(
                position[line.superseded_by] if line.superseded_by is not None else None
            ),
            created_at=line.created_at,
        )
        for line, vector in zip(lines, vectors, strict=True)
    ]
