"""A user's current card vectors read in one snapshot, for a caller that ranks them in memory
(``retrieval.vectors``): the version they are at, the current cards' ids, and the vectors and
keyword postings of the cards the caller does not hold yet (a card's vector and terms never
change: ``card_terms`` rows are written with the card and deleted with it).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, text

from storage.engine import Database

__all__ = ["CurrentVectors", "current_vectors"]

# pgvector's binary output (vector_send): int16 dimension, int16 unused, big-endian float4s.
_HEADER_BYTES = 4


@dataclass(frozen=True, slots=True)
class CurrentVectors:
    """A user's current cards at one version.

    Attributes:
        version: ``card_stats.version`` in the snapshot the rest was read in.
        ids: Every current card's id, ascending.
        new_ids: The ids of the current cards that were not ``known``, ascending.
        new_rows: Their unit vectors, one float32 row each, in ``new_ids``' order.
        new_postings: The keyword postings of the new cards (of every current card when
            the caller held none) by term: one row per card holding the term, its columns
            the card's id, the term's frequency in it and the card's keyword length.
    """

    version: int
    ids: npt.NDArray[np.int64]
    new_ids: npt.NDArray[np.int64]
    new_rows: npt.NDArray[np.float32]
    new_postings: dict[str, npt.NDArray[np.int64]]


def current_vectors(
    database: Database,
    dimension: int,
    user_id: str,
    *,
    known: Sequence[int] | None,
    max_cards: int,
    postings_known: bool = True,
) -> CurrentVectors | None:
    """Read the user's current cards and the vectors and postings of those not ``known`` in
    one repeatable-read snapshot, with the user's version.

    Args:
        database: The database the cards are in.
        dimension: The vectors' dimension.
        user_id: The owner.
        known: Ids whose vectors the caller holds (None: none, every vector is read).
        max_cards: Read nothing for a user with more cards than this.
        postings_known: The caller holds the postings of the ``known`` cards too (False:
            the postings of every current card are read).

    Returns:
        The vectors, or None when the user has no cards or more than ``max_cards``.
    """
    with database.transaction() as transaction:
        transaction.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        stats = transaction.execute(
            text("SELECT version, cards FROM card_stats WHERE user_id = :user_id"),
            {"user_id": user_id},
        ).one_or_none()
        if stats is None or stats.cards > max_cards:
            return None
        if known is None:
            ids, rows = _vectors(transaction, dimension, user_id, None)
            postings = _postings(transaction, user_id, ids)
            return CurrentVectors(int(stats.version), ids, ids, rows, postings)
        current = np.asarray(
            transaction.execute(
                text(
                    "SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM cards "
                    "WHERE user_id = :user_id AND valid_to IS NULL"
                ),
                {"user_id": user_id},
            ).scalar_one(),
            dtype=np.int64,
        )
        held = np.asarray(known, dtype=np.int64)
        new_ids, new_rows = _vectors(
            transaction,
            dimension,
            user_id,
            current[~np.isin(current, held, assume_unique=True)],
        )
        postings = _postings(transaction, user_id, new_ids if postings_known else current)
    return CurrentVectors(int(stats.version), current, new_ids, new_rows, postings)


def _postings(
    connection: Connection, user_id: str, card_ids: npt.NDArray[np.int64]
) -> dict[str, npt.NDArray[np.int64]]:
    """The keyword postings of the user's given cards, by term (``CurrentVectors``)."""
    if len(card_ids) == 0:
        return {}
    # One row per term, not per posting: a user of 10,000 cards has about ten times as many
    # postings as terms, and each row costs the driver more than its array's elements.
    rows = connection.execute(
        text(
            "SELECT term, array_agg(card_id) AS ids, array_agg(frequency) AS frequencies, "
            "array_agg(keyword_length) AS lengths FROM card_terms "
            "WHERE user_id = :user_id AND card_id = ANY(:ids) GROUP BY term"
        ),
        {"user_id": user_id, "ids": card_ids.tolist()},
    ).all()
    return {
        row.term: np.array([row.ids, row.frequencies, row.lengths], dtype=np.int64).T.copy()
        for row in rows
    }


def _vectors(
    connection: Connection,
    dimension: int,
    user_id: str,
    card_ids: npt.NDArray[np.int64] | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The ids and vectors, by id, of the user's given cards (None: every current one)."""
    if card_ids is not None and len(card_ids) == 0:
        return np.empty(0, dtype=np.int64), np.empty((0, dimension), np.float32)
    which = "valid_to IS NULL" if card_ids is None else "id = ANY(:ids)"
    rows = connection.execute(
        text(
            "SELECT id, vector_send(embedding) AS v FROM cards "
            f"WHERE user_id = :user_id AND {which} ORDER BY id"
        ),
        {"user_id": user_id, "ids": [] if card_ids is None else card_ids.tolist()},
    ).all()
    ids = np.fromiter((row.id for row in rows), dtype=np.int64, count=len(rows))
    return ids, _decode(dimension, [row.v for row in rows])


def _decode(dimension: int, blobs: Sequence[bytes]) -> npt.NDArray[np.float32]:
    """pgvector binary vectors to a float32 matrix, one row each."""
    if not blobs:
        return np.empty((0, dimension), dtype=np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
    if raw.shape[1] != _HEADER_BYTES + 4 * dimension:
        raise ValueError(f"stored vectors are not of dimension {dimension}")
    return raw[:, _HEADER_BYTES:].copy().view(">f4").astype(np.float32)
