"""``stratamem keys``: a key is printed once, as the last line; listed and revoked by its id."""

from __future__ import annotations

import pytest
from cli_fixtures import clean_environment

from memory.cli import main
from memory.proxy.keys import KEY_PREFIX, KeyRing, key_hash
from storage import Database
from storage.proxy_keys import ProxyKeyStore


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    return clean_environment(monkeypatch, database_url)


@pytest.fixture
def ring(database: Database) -> KeyRing:
    return KeyRing(ProxyKeyStore(database))


def create(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[str, str]:
    """Run ``keys create``; its output and its last line (the key)."""
    assert main(["keys", "create", *arguments]) == 0
    out = capsys.readouterr().out
    return out, out.splitlines()[-1]


def test_create_prints_a_user_key_as_the_last_line_and_stores_only_its_hash(
    cli_env: str,
    ring: KeyRing,
    database: Database,
    user_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, key = create(capsys, "--user", user_id, "--label", "alice's laptop")

    assert key.startswith(KEY_PREFIX) and len(key) == 46
    assert f"for user '{user_id}'" in out and "shown once" in out
    caller = ring.caller(f"Bearer {key}")
    assert caller is not None and caller.user_id == user_id and not caller.admin
    [record] = ProxyKeyStore(database).list(user_id=user_id)
    assert (record.id, record.label) == (caller.key_id, "alice's laptop")
    with database.reading() as connection:
        stored = connection.exec_driver_sql(
            "SELECT key_hash FROM proxy_keys WHERE id = %s", (record.id,)
        ).scalar_one()
    assert bytes(stored) == key_hash(key) and key.encode() not in bytes(stored)


def test_create_admin_makes_a_key_that_may_name_any_user(
    cli_env: str, ring: KeyRing, capsys: pytest.CaptureFixture[str]
) -> None:
    out, key = create(capsys, "--admin")

    caller = ring.caller(f"Bearer {key}")
    assert caller is not None and caller.admin and caller.user_id is None
    assert "an admin key" in out


def test_create_needs_exactly_one_of_user_and_admin(
    cli_env: str, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for arguments in ([], ["--user", user_id, "--admin"]):
        with pytest.raises(SystemExit) as raised:
            main(["keys", "create", *arguments])
        assert raised.value.code == 2
    assert KEY_PREFIX not in capsys.readouterr().out


def test_a_user_id_that_cannot_be_stored_makes_no_key(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "create", "--user", "x" * 300]) == 1

    captured = capsys.readouterr()
    assert "300 characters" in captured.err
    assert KEY_PREFIX not in captured.out


def test_list_shows_ids_owners_and_states_never_keys(
    cli_env: str, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, first = create(capsys, "--user", user_id, "--label", "phone")
    _, second = create(capsys, "--user", user_id)
    assert main(["keys", "list", "--user", user_id]) == 0
    listing = capsys.readouterr().out

    assert first not in listing and second not in listing and KEY_PREFIX not in listing
    rows = [line for line in listing.splitlines() if user_id in line]
    assert len(rows) == 2
    assert "phone" in rows[0] and all("valid" in row for row in rows)


def test_revoke_ends_a_key_and_says_whose_it_was(
    cli_env: str, ring: KeyRing, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, key = create(capsys, "--user", user_id)
    caller = ring.caller(f"Bearer {key}")
    assert caller is not None

    assert main(["keys", "revoke", str(caller.key_id)]) == 0
    out = capsys.readouterr().out
    assert main(["keys", "list", "--user", user_id]) == 0
    listing = capsys.readouterr().out

    assert f"Revoked key {caller.key_id}, for user '{user_id}'" in out
    assert ring.caller(f"Bearer {key}") is None
    assert "revoked" in listing and " valid" not in listing


def test_revoking_a_key_that_does_not_exist_is_a_usage_error(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "revoke", "999999999"]) == 2

    assert "there is no key 999999999" in capsys.readouterr().err
