"""Who may use the proxy, and as which user: stratamem keys.

Keys are required by default; a user key acts as its user only, an admin key may name any
user; the upstream's key is never a stratamem key and a stratamem key never goes upstream;
``--no-auth`` keeps the open behaviour. Every refusal comes before anything is stored or
forwarded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, contents, recorded, stored, who
from upstream_fake import FakeUpstream

from memory import Memory
from memory.proxy.keys import KEY_PREFIX, OUTAGE_GRACE_S, KeyRing, key_hash, new_key
from retrieval import HashingEmbedder
from storage import Database, DatabaseUnavailableError
from storage.engine import stop_embedded
from storage.proxy_keys import ProxyKeyStore

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def store(proxy_database: Database) -> ProxyKeyStore:
    return ProxyKeyStore(proxy_database)


@pytest.fixture
def ring(store: ProxyKeyStore) -> KeyRing:
    return KeyRing(store)


def health(url: str) -> dict[str, Any]:
    response = httpx.get(url.removesuffix("/v1") + "/healthz")
    assert response.status_code == 200
    return dict(response.json())


def test_with_the_defaults_a_request_without_a_key_is_a_401_and_healthz_stays_open(
    make_proxy: MakeProxy, make_client: MakeClient, upstream: tuple[FakeUpstream, str]
) -> None:
    url = make_proxy(api_key=None)
    anonymous = httpx.post(url + "/chat/completions", json={"model": "m", "messages": HELLO})
    listing = httpx.get(url + "/models")

    assert (anonymous.status_code, listing.status_code) == (401, 401)
    assert anonymous.json()["error"]["code"] == "invalid_api_key"
    assert upstream[0].received == []
    assert health(url) == {"status": "ok", "memory_failures": 0}  # no user, no key named


def test_a_user_key_acts_as_its_user_without_naming_it(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    ring: KeyRing,
    memory: Memory,
    user_id: str,
) -> None:
    key, _ = ring.create(user_id=user_id)
    client = make_client(make_proxy(), api_key=key)  # no X-Stratamem-User at all

    raw = client.chat.completions.with_raw_response.create(model="m", messages=HELLO)  # type: ignore[arg-type]

    assert raw.headers["x-stratamem-memory"] == "ok"
    assert contents(memory, user_id, "default") == ["hello", "echo: hello"]
    # The upstream gets the proxy's own upstream key, never the client's stratamem key.
    assert upstream[0].received[0].headers["authorization"] == "Bearer sk-upstream"


def test_a_user_key_may_name_its_own_user_in_the_header_or_the_body(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    ring: KeyRing,
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    key, _ = ring.create(user_id=user_id)
    url = make_proxy()

    make_client(url, api_key=key, **who(user_id, session_id)).chat.completions.create(
        model="m",
        messages=HELLO,  # type: ignore[arg-type]
    )
    make_client(url, api_key=key).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "again"}],
        user=user_id,
    )

    assert contents(memory, user_id, session_id) == ["hello", "echo: hello"]
    assert contents(memory, user_id, "default") == ["again", "echo: again"]


@pytest.mark.parametrize("where", ["header", "body"])
def test_a_user_key_naming_another_user_is_a_403_and_nothing_moves(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    ring: KeyRing,
    memory: Memory,
    user_id: str,
    session_id: str,
    where: str,
) -> None:
    victim = f"victim-{user_id}"
    memory.record(
        user_id=victim, session_id="default", messages=[{"role": "user", "content": "my PIN"}]
    )
    key, _ = ring.create(user_id=user_id)
    headers = who(victim, "default") if where == "header" else {}
    client = make_client(make_proxy(), api_key=key, **headers)
    extra = {"user": victim} if where == "body" else {}

    with pytest.raises(openai.PermissionDeniedError) as raised:
        client.chat.completions.create(model="m", messages=HELLO, **extra)  # type: ignore[arg-type]

    assert raised.value.status_code == 403
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "user_not_allowed"
    assert upstream[0].received == []
    recorded()
    assert contents(memory, victim, "default") == ["my PIN"]
    assert stored(memory, user_id, session_id) == []
    assert stored(memory, user_id, "default") == []


def test_an_admin_key_names_any_user_or_none(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    ring: KeyRing,
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    key, record = ring.create(user_id=None, label="ops")
    url = make_proxy()

    named = make_client(url, api_key=key, **who(user_id, session_id))
    named.chat.completions.create(model="m", messages=HELLO)  # type: ignore[arg-type]
    nobody = make_client(url, api_key=key).chat.completions.with_raw_response.create(
        model="m",
        messages=HELLO,  # type: ignore[arg-type]
    )

    assert record.admin and record.user_id is None
    assert contents(memory, user_id, session_id) == ["hello", "echo: hello"]
    assert "x-stratamem-memory" not in nobody.headers  # passed through, without memory
    assert upstream[0].bodies[-1] == {"model": "m", "messages": HELLO}


def test_a_revoked_key_is_refused_on_its_next_request(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    ring: KeyRing,
    store: ProxyKeyStore,
    user_id: str,
) -> None:
    key, record = ring.create(user_id=user_id)
    client = make_client(make_proxy(), api_key=key)
    client.chat.completions.create(model="m", messages=HELLO)  # type: ignore[arg-type]

    revoked = store.revoke(record.id)

    assert revoked is not None and revoked.revoked_at is not None
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="m", messages=HELLO)  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_with_keys_and_no_upstream_key_the_clients_key_never_goes_upstream(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    admin_key: str,
    user_id: str,
    session_id: str,
) -> None:
    url = make_proxy(api_key=None)

    make_client(url, **who(user_id, session_id)).chat.completions.create(
        model="m",
        messages=HELLO,  # type: ignore[arg-type]
    )
    make_client(url).models.list()

    for received in upstream[0].received:
        assert "authorization" not in received.headers
        assert admin_key not in str(received.headers)


def test_without_auth_anyone_may_name_any_user(
    make_proxy: MakeProxy,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    url = make_proxy(require_keys=False)

    response = httpx.post(
        url + "/chat/completions",
        json={"model": "m", "messages": HELLO},
        headers=who(user_id, session_id),
    )

    assert response.status_code == 200
    assert contents(memory, user_id, session_id) == ["hello", "echo: hello"]


def test_keys_look_like_keys_and_only_their_hash_is_stored(
    ring: KeyRing, proxy_database: Database, user_id: str
) -> None:
    key, record = ring.create(user_id=user_id, label="laptop")

    assert key.startswith(KEY_PREFIX) and len(key) == 46 and key != new_key()
    assert (record.user_id, record.admin, record.label) == (user_id, False, "laptop")
    with proxy_database.reading() as connection:
        rows = connection.exec_driver_sql(
            "SELECT key_hash FROM proxy_keys WHERE id = %s", (record.id,)
        ).all()
    assert [bytes(row[0]) for row in rows] == [key_hash(key)]
    assert ring.caller(f"Bearer {key}") is not None
    assert ring.caller(f"bearer  {key} ") is not None  # the scheme is case-insensitive
    assert ring.caller(key) is None  # no scheme
    assert ring.caller(f"Bearer {key[:-1]}x") is None


@pytest.mark.slow
def test_while_the_database_is_down_only_keys_found_valid_lately_work(
    fresh_data_dir: Path,
) -> None:
    now = [1_000.0]
    # By URL, as a database elsewhere is: a handle on the data folder would start the
    # server again at its next use (the outage must last).
    holder = Database.open(data_dir=fresh_data_dir)
    with holder, Database.open(holder.url) as database:
        store = ProxyKeyStore(database)
        ring = KeyRing(store, clock=lambda: now[0])
        seen, seen_record = ring.create(user_id="u")
        unseen, _ = ring.create(user_id="v")
        assert ring.caller(f"Bearer {seen}") is not None

        stop_embedded((fresh_data_dir / "pg").resolve())

        caller = ring.caller(f"Bearer {seen}")
        assert caller is not None and (caller.key_id, caller.user_id) == (seen_record.id, "u")
        with pytest.raises(DatabaseUnavailableError):
            ring.caller(f"Bearer {unseen}")
        assert ring.caller("Bearer sk-not-a-stratamem-key") is None  # no database needed
        now[0] += OUTAGE_GRACE_S + 1
        with pytest.raises(DatabaseUnavailableError):
            ring.caller(f"Bearer {seen}")


@pytest.mark.slow
def test_a_key_that_cannot_be_checked_is_a_503_and_nothing_moves(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    fresh_data_dir: Path,
) -> None:
    # By URL, the memory's database: the outage must last (closed, both: no connection left).
    with (
        Database.open(data_dir=fresh_data_dir) as holder,
        Memory.open(holder.url, embedder=HashingEmbedder()) as own,
    ):
        key, _ = KeyRing(ProxyKeyStore(own.database)).create(user_id="u")
        client = make_client(make_proxy(own), api_key=key)
        stop_embedded((fresh_data_dir / "pg").resolve())

        with pytest.raises(openai.InternalServerError) as raised:
            client.chat.completions.create(model="m", messages=HELLO)  # type: ignore[arg-type]

    assert raised.value.status_code == 503
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "keys_unavailable"
    assert upstream[0].received == []


def test_forgetting_a_user_leaves_the_operators_keys(
    ring: KeyRing, store: ProxyKeyStore, memory: Memory, user_id: str
) -> None:
    # Keys are credentials, not memory: erasing the user's data keeps them until revoked.
    key, record = ring.create(user_id=user_id)
    memory.record(user_id=user_id, session_id="s", messages=HELLO)

    memory.forget(user_id=user_id)

    assert stored(memory, user_id, "s") == []
    caller = ring.caller(f"Bearer {key}")
    assert caller is not None and caller.user_id == user_id
    assert [k.id for k in store.list(user_id=user_id)] == [record.id]
