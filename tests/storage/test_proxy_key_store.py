"""``ProxyKeyStore``: keys stored as hashes, found by one lookup, listed, revoked for good."""

import hashlib
import uuid

import pytest
from sqlalchemy import text

from storage import Database, InvalidInputError
from storage.proxy_keys import MAX_LABEL_LENGTH, ProxyKeyStore


def a_hash() -> bytes:
    return hashlib.sha256(uuid.uuid4().bytes).digest()


@pytest.fixture
def store(database: Database) -> ProxyKeyStore:
    return ProxyKeyStore(database)


def test_a_key_is_found_by_its_hash_until_it_is_revoked(store: ProxyKeyStore, user_id: str) -> None:
    hashed = a_hash()
    added = store.add(hashed, user_id=user_id, label="cli")

    found = store.find(hashed)
    revoked = store.revoke(added.id)
    again = store.revoke(added.id)

    assert found == (added, hashed)
    assert (added.user_id, added.admin, added.label, added.revoked_at) == (
        user_id,
        False,
        "cli",
        None,
    )
    assert revoked is not None and revoked.revoked_at is not None
    assert again == revoked  # the first revocation time stays
    assert store.find(hashed) is None
    assert store.list(user_id=user_id) == [revoked]


def test_an_admin_key_has_no_user(store: ProxyKeyStore) -> None:
    added = store.add(a_hash(), user_id=None)

    assert (added.user_id, added.admin) == (None, True)
    assert added in store.list()


def test_unknown_hashes_and_ids_find_nothing(store: ProxyKeyStore) -> None:
    assert store.find(a_hash()) is None
    assert store.find(b"short") is None
    assert store.revoke(10**12) is None


@pytest.mark.parametrize(
    ("hashed", "user", "label", "why"),
    [
        (b"x" * 31, "u", None, "32 bytes"),
        (None, "", None, "must not be empty"),
        (None, "u\x00", None, "NUL"),
        (None, "u", "x" * (MAX_LABEL_LENGTH + 1), "at most"),
        (None, "u", "\ud800", "lone surrogate"),
    ],
)
def test_what_cannot_be_a_key_is_refused_and_nothing_is_stored(
    store: ProxyKeyStore,
    database: Database,
    hashed: bytes | None,
    user: str,
    label: str | None,
    why: str,
) -> None:
    with database.reading() as connection:
        before = connection.execute(text("SELECT count(*) FROM proxy_keys")).scalar_one()

    with pytest.raises(InvalidInputError, match=why):
        store.add(hashed or a_hash(), user_id=user, label=label)

    with database.reading() as connection:
        assert connection.execute(text("SELECT count(*) FROM proxy_keys")).scalar_one() == before


def test_a_hash_is_stored_once(store: ProxyKeyStore, user_id: str) -> None:
    hashed = a_hash()
    store.add(hashed, user_id=user_id)

    with pytest.raises(InvalidInputError):
        store.add(hashed, user_id=None)

    assert [key.user_id for key in store.list() if store.find(hashed) == (key, hashed)] == [user_id]


def test_the_table_refuses_a_user_key_marked_admin(database: Database) -> None:
    with pytest.raises(InvalidInputError), database.transaction() as session:
        session.execute(
            text("INSERT INTO proxy_keys (key_hash, user_id, admin) VALUES (:h, 'u', true)"),
            {"h": a_hash()},
        )
