"""The inspector page over HTTP: what each page shows of the demo's data, who may see it, what
a form needs to change anything, and that nothing stored becomes markup or reaches the logs.

A real uvicorn server on loopback over a real ``Memory`` on the shared embedded Postgres; the
demo's conversation played offline with the hashing embedder.
"""

from __future__ import annotations

import html
import logging
import re
import uuid
from collections.abc import Iterator

import httpx
import pytest
from ui_harness import *  # noqa: F403 (fixtures)
from ui_harness import SCRIPT, Played, Served, demo_memory, serve

from memory import Memory
from memory.proxy.keys import KeyRing
from memory.ui import CONTENT_SECURITY_POLICY
from storage import Database
from storage.proxy_keys import ProxyKeyStore


@pytest.fixture(scope="module")
def page_memory(ui_database: Database) -> Memory:
    """The page's own ``Memory`` (as ``stratamem ui`` opens one)."""
    return demo_memory(ui_database)


@pytest.fixture(scope="module")
def site(page_memory: Memory) -> Iterator[str]:
    """The page, keys required, served on loopback: its base URL."""
    with serve(page_memory) as served:
        yield served.url


@pytest.fixture
def admin(site: str, admin_key: str) -> Iterator[httpx.Client]:
    """A client that presents the admin key as its bearer token."""
    with httpx.Client(base_url=site, headers={"Authorization": f"Bearer {admin_key}"}) as client:
        yield client


def csrf_of(html: str) -> str:
    """The CSRF token a page's form carries."""
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


@pytest.mark.slow
def test_without_a_key_the_page_asks_for_one_and_shows_nothing(site: str, played: Played) -> None:
    with httpx.Client(base_url=site) as client:
        home = client.get("/", params={"q": played.user_id})
        posted = client.post("/act", data={"action": "forget_user", "user": played.user_id})

    assert home.status_code == 303 and home.headers["location"].startswith("/login?next=")
    assert played.user_id not in home.text
    assert posted.status_code == 401


def test_a_user_key_opens_no_page(site: str, user_key: str, played: Played) -> None:
    headers = {"Authorization": f"Bearer {user_key}"}
    with httpx.Client(base_url=site, headers=headers) as client:
        refused = client.get("/user", params={"user": "someone"})

    assert refused.status_code == 403
    assert "admin key" in refused.text


def test_login_sets_an_http_only_cookie_and_a_revoked_key_ends_it(
    site: str, ui_database: Database, played: Played
) -> None:
    ring = KeyRing(ProxyKeyStore(ui_database))
    key, record = ring.create(user_id=None, label="login test")
    with httpx.Client(base_url=site) as client:
        wrong = client.post("/login", data={"key": "sm_" + "x" * 43, "next": "/"})
        logged = client.post("/login", data={"key": key, "next": "/user?user=x"})
        cookie = logged.headers["set-cookie"]
        inside = client.get("/", params={"q": played.user_id})
        ProxyKeyStore(ui_database).revoke(record.id)
        after = client.get("/")

    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert logged.status_code == 303 and logged.headers["location"] == "/user?user=x"
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and key not in cookie
    assert inside.status_code == 200 and played.user_id in inside.text
    assert after.status_code == 303 and after.headers["location"].startswith("/login")


def test_every_response_forbids_scripts_and_frames(admin: httpx.Client, played: Played) -> None:
    for path in ("/", "/login", "/ui.css", "/nowhere"):
        response = admin.get(path)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-frame-options"] == "DENY"
    assert "script-src" not in CONTENT_SECURITY_POLICY  # default-src 'none' covers scripts


def test_a_host_name_other_than_loopback_is_refused(admin: httpx.Client) -> None:
    """A site that rebinds its own name to 127.0.0.1 reaches the port, not the page."""
    refused = admin.get("/", headers={"Host": "attacker.example:80"})

    assert refused.status_code == 421


def test_the_home_page_finds_users_and_sessions_by_id(admin: httpx.Client, played: Played) -> None:
    found = admin.get("/", params={"q": played.user_id[-6:].upper()})
    user = admin.get("/user", params={"user": played.user_id})

    assert found.status_code == 200 and played.user_id in found.text
    assert user.status_code == 200
    for session_id in played.sessions:
        assert f"session={session_id}" in user.text
    assert "Never restart the payments database" in user.text  # the pin
    assert re.search(r"v\d+ \(raw\), through \d+", user.text)  # a summary version


def test_the_session_page_shows_each_layer_drops_and_recall(
    admin: httpx.Client, played: Played
) -> None:
    page = admin.get("/session", params={"user": played.user_id, "session": "s3"}).text

    chart = page[page.index('id="chart"') :]
    for layer in ("system", "summary", "memories", "window", "input"):
        assert re.search(f'<rect[^>]*data-layer="{layer}"', chart), f"no {layer} in the chart"
    assert 'class="boundary"' in page  # the summary boundary among the messages
    assert "recalled" in page and 'class="recalled"' in page
    assert "pin</td>" in page  # the pin recalled first, marked as such


@pytest.mark.slow
def test_messages_are_paged_and_a_seq_opens_its_page(
    admin: httpx.Client, ui_database: Database
) -> None:
    mem = demo_memory(ui_database)
    user_id = f"user-{uuid.uuid4()}"
    mem.record(
        user_id=user_id,
        session_id="long",
        messages=[{"role": "user", "content": f"message number {n}"} for n in range(1, 251)],
    )

    last = admin.get("/session", params={"user": user_id, "session": "long"}).text
    at = admin.get("/session", params={"user": user_id, "session": "long", "at": 150}).text

    assert "message number 250" in last and "message number 200" not in last
    assert "page 3 of 3" in last
    assert 'id="m150"' in at and "page 2 of 3" in at and "message number 250" not in at


def test_a_stored_script_is_shown_as_text_never_as_markup(
    admin: httpx.Client, played: Played
) -> None:
    page = admin.get("/session", params={"user": played.user_id, "session": "xss"}).text

    assert "<script" not in page.lower()
    assert "<b>bold?</b>" not in page
    assert html.escape(SCRIPT, quote=True) in page


def test_summary_versions_say_what_each_covered(admin: httpx.Client, ui_database: Database) -> None:
    mem = demo_memory(ui_database)
    user_id = f"user-{uuid.uuid4()}"
    words = " ".join(["deploy"] * 60)
    for turn in range(60):
        mem.record(
            user_id=user_id,
            session_id="s",
            messages=[
                {"role": "user", "content": f"turn {turn}: {words}"},
                {"role": "assistant", "content": f"answer {turn}: {words}"},
            ],
        )
        summary = mem.summary(user_id=user_id, session_id="s")
        if summary is not None and summary.version >= 3:
            break
    assert summary is not None and summary.version >= 3, "the session folds three times"

    page = admin.get("/summary", params={"user": user_id, "session": "s"}).text

    versions = [int(v) for v in re.findall(r'data-version="(\d+)"', page)]
    assert versions == list(range(summary.version, 0, -1))
    assert f"Version {summary.version} (current)" in page
    boundaries = [int(b) for b in re.findall(r"messages 1\u2013(\d+)</a>", page)]
    assert boundaries == sorted(boundaries, reverse=True) and len(set(boundaries)) == len(versions)
    assert page.count("folded messages") == len(versions)


def test_the_memory_page_shows_a_supersede_chain_and_searches_with_scores(
    admin: httpx.Client, played: Played
) -> None:
    page = admin.get("/memory", params={"user": played.user_id}).text
    found = admin.get(
        "/memory", params={"user": played.user_id, "q": "Lisbon", "superseded": "1"}
    ).text

    chain = page[page.index('id="chains"') :]
    assert "Berlin" in chain and "Lisbon" in chain and "superseded" in chain
    assert "score " in found and "similarity" in found and 'id="hits"' in found


def test_a_form_without_its_token_changes_nothing(
    admin: httpx.Client, page_memory: Memory, played: Played
) -> None:
    [pin] = page_memory.pins(user_id=played.user_id)
    form = {"action": "unpin", "user": played.user_id, "card": str(pin.id)}

    forged = admin.post("/act", data=form | {"csrf": "0" * 64})
    other_site = admin.post("/act", data=form, headers={"Origin": "http://attacker.example"})

    assert forged.status_code == 403 and other_site.status_code == 403
    assert [card.id for card in page_memory.pins(user_id=played.user_id)] == [pin.id]


def test_pin_unpin_and_forget_a_card_go_through_memory(
    admin: httpx.Client, ui_database: Database
) -> None:
    mem = demo_memory(ui_database)
    user_id = f"user-{uuid.uuid4()}"
    card = mem.pin(user_id=user_id, text="Deploys need two approvals.")
    where = {"user": user_id, "card": card.id}

    asked = admin.get("/confirm", params={"action": "unpin", **where})
    token = csrf_of(asked.text)
    unpinned = admin.post("/act", data={"action": "unpin", "csrf": token, **where})
    pins_after_unpin = mem.pins(user_id=user_id)
    pinned = admin.post("/act", data={"action": "pin", "csrf": token, **where})
    pins_after_pin = mem.pins(user_id=user_id)
    forgotten = admin.post("/act", data={"action": "forget_card", "csrf": token, **where})
    again = admin.post("/act", data={"action": "forget_card", "csrf": token, **where})

    assert asked.status_code == 200 and "Deploys need two approvals." in asked.text
    assert unpinned.status_code == 200 and pins_after_unpin == []
    assert pinned.status_code == 200 and [c.id for c in pins_after_pin] == [card.id]
    assert forgotten.status_code == 200 and f"Forgot card {card.id}" in forgotten.text
    assert again.status_code == 404  # the public API's check: no such card
    assert mem.pins(user_id=user_id) == []


def test_forgetting_a_user_needs_the_id_typed_again(
    admin: httpx.Client, ui_database: Database
) -> None:
    mem = demo_memory(ui_database)
    user_id = f"user-{uuid.uuid4()}"
    mem.prepare(user_id=user_id, session_id="s", input="remember the blue door")
    token = csrf_of(admin.get("/confirm", params={"action": "forget_user", "user": user_id}).text)
    form = {"action": "forget_user", "user": user_id, "csrf": token}

    mistyped = admin.post("/act", data=form | {"confirm_user": "someone else"})
    kept = mem.history(user_id=user_id, session_id="s")
    done = admin.post("/act", data=form | {"confirm_user": user_id})

    assert mistyped.status_code == 400 and len(kept) == 1
    assert done.status_code == 200 and "1 message" in done.text
    assert mem.history(user_id=user_id, session_id="s") == []


def test_bad_arguments_get_a_page_that_says_so(admin: httpx.Client, played: Played) -> None:
    missing = admin.get("/session", params={"user": played.user_id, "session": "nope"})
    wrong = admin.get("/session", params={"user": played.user_id, "session": "s1", "page": "x"})
    bad_type = admin.get("/memory", params={"user": played.user_id, "type": "gossip"})
    bad_date = admin.get("/memory", params={"user": played.user_id, "q": "x", "since": "soon"})

    assert missing.status_code == 404 and wrong.status_code == 400
    assert bad_type.status_code == 400
    assert bad_date.status_code == 200 and "not a date" in bad_date.text


def test_no_message_content_or_query_reaches_the_logs(
    admin: httpx.Client, played: Played, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "blue-heron-4711"
    with caplog.at_level(logging.DEBUG):
        admin.get("/session", params={"user": played.user_id, "session": "xss"})
        admin.get("/memory", params={"user": played.user_id, "q": secret})
        admin.get("/memory", params={"user": played.user_id, "q": secret, "since": "soon"})

    # Everything the server side logged (the test's own HTTP client logs its URLs).
    logged = "\n".join(
        record.getMessage()
        for record in caplog.records
        if not record.name.startswith(("httpx", "httpcore"))
    )
    assert "GET /memory 200" in logged  # the page does log its requests
    assert secret not in logged and "pwned" not in logged and played.user_id not in logged


def test_without_auth_the_page_opens_but_forms_still_need_their_token(
    page_memory: Memory, played: Played
) -> None:
    with Served(create_open(page_memory)) as served, httpx.Client(base_url=served.url) as client:
        home = client.get("/")
        posted = client.post("/act", data={"action": "forget_user", "user": played.user_id})

    assert home.status_code == 200
    assert posted.status_code == 403
    assert page_memory.history(user_id=played.user_id, session_id="s1") != []


def create_open(mem: Memory) -> object:
    """The page with ``--no-auth``."""
    from memory.ui import create_app

    return create_app(mem, require_keys=False)
