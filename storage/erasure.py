"""Erasure for real (everything of a user, one session, or one card), and the check every write
made from earlier reads makes against it.

``erase`` deletes in one transaction, from every table, whatever the settings: no card store,
no embedder, nothing but SQL. It locks the erased sessions first (``FOR UPDATE``).

Why a check: a fold's summary and cards, an archive mark, a reply to an assembled context are
each made from messages read earlier (milliseconds or an LLM call before they are stored). If
``erase`` ran in between, storing them would bring back what the user asked to forget, perhaps
into a session that already started again under the same name. So each such write first locks
its session row (``FOR KEY SHARE``) and checks that the messages it was made from are still
stored under the ids it read (``lock_source``, ``lock_sources``): a message id is never reused,
so a session erased and started again fails the check. The locks order the two: a write that
locked first is stored, then erased with the rest; one that comes after finds its messages
gone and raises ``SessionErasedError``, storing nothing.

Deleted rows stay in Postgres's data files and write-ahead log until they are vacuumed and the
WAL segments recycled (docs/security.md, "Erasure").
"""

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Connection, text

from storage.cards.term_counts import count_terms, forget_term_counts
from storage.engine import Database
from storage.errors import InvalidInputError, SessionErasedError, sqlstate
from storage.inputs import check_id

__all__ = ["Erased", "delete_cards", "erase", "lock_source", "lock_sources"]


@dataclass(frozen=True, slots=True)
class Erased:
    """How many rows one erasure deleted, by table, so a caller can say what is gone.

    Attributes:
        messages: stored messages.
        summaries: rolling summaries (at most one per session).
        cards: long-term memory cards, pins included.
        jobs: background jobs, whatever their state (pending, running, done, failed).
        card_terms: the cards' keyword terms.
        archive_marks: how far each session was archived as cards.
        sessions: the sessions themselves.
        reports: kept reports of ``prepare`` (``request_reports``).
        summary_versions: the kept versions of summaries that newer ones replaced.
        store_items: items of framework stores (LangGraph's), with their vectors and terms;
            only a whole user's erasure deletes them (they belong to no session).
        agent_item_pops: items an agent framework's session took back (``storage.agent_items``).
    """

    messages: int = 0
    summaries: int = 0
    cards: int = 0
    jobs: int = 0
    card_terms: int = 0
    archive_marks: int = 0
    sessions: int = 0
    reports: int = 0
    summary_versions: int = 0
    store_items: int = 0
    agent_item_pops: int = 0

    def by_table(self) -> dict[str, int]:
        """The counts keyed by table name (summaries are ``session_summaries``)."""
        counts = {field.name: getattr(self, field.name) for field in fields(self)}
        counts["session_summaries"] = counts.pop("summaries")
        counts["request_reports"] = counts.pop("reports")
        return counts


# The tables of a session's conversation, children before the sessions they reference.
_CONVERSATION = (
    ("jobs", "jobs"),
    ("archive_marks", "archive_marks"),
    ("reports", "request_reports"),
    ("summary_versions", "summary_versions"),
    ("summaries", "session_summaries"),
    ("agent_item_pops", "agent_item_pops"),
    ("messages", "messages"),
    ("sessions", "sessions"),
)


def erase(
    database: Database,
    user_id: str,
    *,
    session_id: str | None = None,
    card_id: int | None = None,
) -> Erased:
    """Delete for real, in one transaction: one card, one session, or everything of the user.

    A session goes with its messages, summary (and its kept versions), kept reports, jobs,
    archive mark and cards (their terms too); the whole user is every session and every
    card (pins included), the keyword statistics and the user's items of framework stores
    (``storage.items``).
    A card that a deleted card had superseded keeps its ``valid_to``: it was still replaced.

    Returns:
        How many rows went, by table (all zero for a user or session nobody has).

    Raises:
        InvalidInputError: An id is not usable.
        ValueError: Both ``session_id`` and ``card_id`` were given.
    """
    # A session started while this runs (its row created after the lock below, its first
    # message stored after the messages were deleted) makes the delete of its row fail on the
    # messages' foreign key. The transaction is then run again: the row exists by then, so
    # the lock holds its writers off.
    attempt = 1
    while True:
        try:
            return _erase_once(database, user_id, session_id=session_id, card_id=card_id)
        except InvalidInputError as error:
            if attempt == _ATTEMPTS or not _started_meanwhile(error):
                raise
            attempt += 1


#: How often ``erase`` runs its transaction when sessions start while it runs.
_ATTEMPTS = 3


def _started_meanwhile(error: InvalidInputError) -> bool:
    """Whether the database refused an erasure on a foreign key (SQLSTATE 23503): a row that
    references what it deleted was committed meanwhile."""
    return error.__cause__ is not None and sqlstate(error.__cause__) == "23503"


def _erase_once(
    database: Database, user_id: str, *, session_id: str | None, card_id: int | None
) -> Erased:
    """One transaction of ``erase``."""
    check_id("user_id", user_id)
    if session_id is not None and card_id is not None:
        raise ValueError("erase one card or one session, not both")
    where = "user_id = :user_id"
    params: dict[str, Any] = {"user_id": user_id}
    if session_id is not None:
        check_id("session_id", session_id)
        where += " AND session_id = :session_id"
        params["session_id"] = session_id
    counts: dict[str, int] = {}
    with database.transaction() as connection:
        if card_id is None:
            # The sessions first: a derived write that holds one is stored before this goes
            # on (and is deleted with the rest); one that comes later finds it gone.
            connection.execute(
                text(f"SELECT 1 FROM sessions WHERE {where} ORDER BY session_id FOR UPDATE"),
                params,
            )
            for name, table in _CONVERSATION:
                counts[name] = _rowcount(
                    connection.execute(text(f"DELETE FROM {table} WHERE {where}"), params)
                )
            cards_where = where
            if session_id is None:
                # Their vectors and terms go with them (ON DELETE CASCADE).
                counts["store_items"] = _rowcount(
                    connection.execute(text(f"DELETE FROM store_items WHERE {where}"), params)
                )
        else:
            cards_where = "user_id = :user_id AND id = :card_id"
            params["card_id"] = card_id
        counts["cards"], counts["card_terms"] = delete_cards(
            connection,
            user_id,
            cards_where,
            params,
            whole_user=session_id is None and card_id is None,
        )
    return Erased(**counts)


def delete_cards(
    connection: Connection,
    user_id: str,
    where: str,
    params: dict[str, Any],
    *,
    whole_user: bool,
) -> tuple[int, int]:
    """Delete the user's cards that ``where`` selects, their terms, and their share of the
    keyword statistics (all of them with ``whole_user``); (cards, terms) deleted."""
    gone = connection.execute(
        text(f"DELETE FROM cards WHERE {where} RETURNING id, keyword_length"), params
    ).all()
    if whole_user:
        terms = connection.execute(
            text("DELETE FROM card_terms WHERE user_id = :user_id"), {"user_id": user_id}
        )
        connection.execute(
            text("DELETE FROM card_stats WHERE user_id = :user_id"), {"user_id": user_id}
        )
        forget_term_counts(connection, user_id)
        return len(gone), _rowcount(terms)
    if not gone:
        return 0, 0
    ids = [row.id for row in gone]
    gone_terms: list[str] = list(
        connection.execute(
            text(
                "DELETE FROM card_terms WHERE user_id = :user_id AND card_id = ANY(:ids) "
                "RETURNING term"
            ),
            {"user_id": user_id, "ids": ids},
        )
        .scalars()
        .all()
    )
    connection.execute(
        text(
            "UPDATE cards SET superseded_by = NULL "
            "WHERE user_id = :user_id AND superseded_by = ANY(:ids)"
        ),
        {"user_id": user_id, "ids": ids},
    )
    # Fewer cards, a new card version (``storage.cards.vectors``); none left, no statistics.
    connection.execute(
        text(
            "UPDATE card_stats SET cards = cards - :cards, "
            "keyword_length = keyword_length - :length, "
            "version = (SELECT nextval('card_stats_version_seq')) WHERE user_id = :user_id"
        ),
        {
            "user_id": user_id,
            "cards": len(gone),
            "length": sum(row.keyword_length for row in gone),
        },
    )
    # Under the statistics row's lock, as every writer of the counts (storage.cards.term_counts).
    count_terms(connection, user_id, gone_terms, sign=-1)
    connection.execute(
        text("DELETE FROM card_stats WHERE user_id = :user_id AND cards <= 0"),
        {"user_id": user_id},
    )
    return len(gone), len(gone_terms)


def lock_source(
    connection: Connection, user_id: str, session_id: str, seq: int, message_id: int
) -> None:
    """Hold the session against erasure for this transaction, if message ``seq`` is still the
    one with ``message_id`` (what the caller's write was made from).

    Raises:
        SessionErasedError: The session or that message is gone: it was erased since it was
            read (or, for a session started again, replaced).
    """
    held = connection.execute(
        text(
            "SELECT 1 FROM sessions AS s "
            "WHERE s.user_id = :user_id AND s.session_id = :session_id AND EXISTS ("
            "  SELECT FROM messages AS m WHERE m.user_id = :user_id "
            "  AND m.session_id = :session_id AND m.seq = :seq AND m.id = :message_id"
            ") FOR KEY SHARE OF s"
        ),
        {"user_id": user_id, "session_id": session_id, "seq": seq, "message_id": message_id},
    ).first()
    if held is None:
        raise SessionErasedError(
            f"session {session_id[:64]!r} of user {user_id[:64]!r} does not hold message {seq} "
            "as it was read (erased since?); nothing was stored"
        )


def lock_sources(connection: Connection, user_id: str, message_ids: Sequence[int]) -> None:
    """Hold the sessions of the user's messages ``message_ids`` against erasure for this
    transaction, if every one of them is still stored.

    Raises:
        SessionErasedError: One of them is gone (erased since it was read).
    """
    wanted = sorted(set(message_ids))
    if not wanted:
        return
    params = {"user_id": user_id, "ids": wanted}
    connection.execute(
        text(
            "SELECT 1 FROM sessions AS s WHERE s.user_id = :user_id AND s.session_id IN ("
            "  SELECT m.session_id FROM messages AS m "
            "  WHERE m.user_id = :user_id AND m.id = ANY(:ids)"
            ") ORDER BY s.session_id FOR KEY SHARE OF s"
        ),
        params,
    )
    # Counted after the locks, in a snapshot of its own: an erasure that held a session first
    # has committed by now, and its messages are gone from this count.
    stored = connection.execute(
        text("SELECT count(*) FROM messages WHERE user_id = :user_id AND id = ANY(:ids)"), params
    ).scalar_one()
    if stored != len(wanted):
        raise SessionErasedError(
            f"{len(wanted) - stored} of the {len(wanted)} messages a card of user "
            f"{user_id[:64]!r} was made from were erased since they were read; nothing was stored"
        )


def _rowcount(result: Any) -> int:
    return int(result.rowcount)
