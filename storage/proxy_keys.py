"""``ProxyKeyStore``: the memory proxy's keys, stored as hashes (persistence only).

A key itself is never stored: only its SHA-256 (32 bytes), which the caller computes. A key
is bound to one user, or is an admin key (no user). A key is found by its hash with one
indexed lookup; a revoked key is never found again. Making keys and checking requests is the
proxy's (``memory.proxy.keys``).
"""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import text

from storage.engine import Database
from storage.errors import InvalidInputError
from storage.inputs import check_id, check_text

__all__ = ["HASH_BYTES", "MAX_LABEL_LENGTH", "ProxyKey", "ProxyKeyStore"]

#: The length of a key's hash (SHA-256).
HASH_BYTES = 32
#: The longest label, in characters.
MAX_LABEL_LENGTH = 200

_COLUMNS = "id, user_id, admin, label, created_at, revoked_at"

_FIND = text(
    f"SELECT {_COLUMNS}, key_hash FROM proxy_keys WHERE key_hash = :key_hash AND revoked_at IS NULL"
)


class ProxyKey(BaseModel):
    """One key as stored, without the key (which is never stored).

    Attributes:
        id: the key's number, by which it is listed and revoked.
        user_id: the user the key acts as; ``None`` for an admin key.
        admin: an admin key, which may name any user (``user_id`` is then ``None``).
        label: the operator's note (who holds it, where it is used), or ``None``.
        created_at: when it was made.
        revoked_at: when it was revoked; ``None`` while it is valid.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    user_id: str | None
    admin: bool
    label: str | None
    created_at: datetime
    revoked_at: datetime | None


class ProxyKeyStore:
    """Adds, finds, lists and revokes the proxy's keys."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def add(self, key_hash: bytes, *, user_id: str | None, label: str | None = None) -> ProxyKey:
        """Store a new key's hash, bound to ``user_id`` (``None``: an admin key).

        Raises:
            InvalidInputError: the hash is not 32 bytes, the user id or the label is not
                usable, or the hash is stored already.
        """
        _check_hash(key_hash)
        if user_id is not None:
            check_id("user_id", user_id)
        if label is not None:
            _check_label(label)
        with self._database.transaction() as connection:
            row = connection.execute(
                text(
                    "INSERT INTO proxy_keys (key_hash, user_id, admin, label) "
                    "VALUES (:key_hash, :user_id, :admin, :label) "
                    f"RETURNING {_COLUMNS}"
                ),
                {
                    "key_hash": key_hash,
                    "user_id": user_id,
                    "admin": user_id is None,
                    "label": label,
                },
            ).one()
        return _key(row._mapping)

    def find(self, key_hash: bytes) -> tuple[ProxyKey, bytes] | None:
        """The valid (not revoked) key with this hash and its stored hash, or ``None``.

        One statement on the hash's unique index. The stored hash comes back so that the
        caller can compare it in constant time.
        """
        if len(key_hash) != HASH_BYTES:
            return None
        with self._database.reading() as connection:
            row = connection.execute(_FIND, {"key_hash": key_hash}).one_or_none()
        if row is None:
            return None
        return _key(row._mapping), bytes(row.key_hash)

    def list(self, *, user_id: str | None = None) -> list[ProxyKey]:
        """Every key (revoked ones included), oldest first; only ``user_id``'s when given."""
        where, params = "", {}
        if user_id is not None:
            check_id("user_id", user_id)
            where, params = "WHERE user_id = :user_id", {"user_id": user_id}
        with self._database.reading() as connection:
            rows = connection.execute(
                text(f"SELECT {_COLUMNS} FROM proxy_keys {where} ORDER BY id"), params
            ).all()
        return [_key(row._mapping) for row in rows]

    def revoke(self, key_id: int) -> ProxyKey | None:
        """Revoke the key ``key_id`` from now on; ``None`` when there is no such key.

        Revoking a revoked key changes nothing and returns it as it is (with its first
        revocation time).
        """
        with self._database.transaction() as connection:
            row = connection.execute(
                text(
                    # least() passes over a NULL: the first revocation time stays. Not
                    # coalesce: Citus refuses a non-immutable function inside it.
                    "UPDATE proxy_keys SET revoked_at = least(revoked_at, now()) "
                    f"WHERE id = :id RETURNING {_COLUMNS}"
                ),
                {"id": key_id},
            ).one_or_none()
        return None if row is None else _key(row._mapping)


def _check_hash(key_hash: bytes) -> None:
    if not isinstance(key_hash, bytes) or len(key_hash) != HASH_BYTES:
        raise InvalidInputError(f"a key's hash must be {HASH_BYTES} bytes")


def _check_label(label: str) -> None:
    if not isinstance(label, str):
        raise InvalidInputError(f"a key's label must be a string, not {type(label).__name__}")
    if len(label) > MAX_LABEL_LENGTH:
        raise InvalidInputError(
            f"a key's label has {len(label)} characters; at most {MAX_LABEL_LENGTH} are allowed"
        )
    check_text("a key's label", label)


def _key(row: Any) -> ProxyKey:
    return ProxyKey(
        id=row["id"],
        user_id=row["user_id"],
        admin=row["admin"],
        label=row["label"],
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )
