"""The inspector page in a real browser: headless Chromium (the system's, Debian's ``chromium``
package; Playwright drives it, no browser is downloaded) walks users -> session -> long-term
memory -> summary versions -> a confirmed action, takes screenshots and checks them, and shows
a stored ``<script>`` as text without running it.

The screenshots are checked by their pixels (decoded by the same browser on a blank page): the
session's chart must show the colour of each of the four layers, a page must not be blank.
They are kept under pytest's temporary directory (the path is printed on failure).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright
from ui_harness import *  # noqa: F403 (fixtures)
from ui_harness import SCRIPT, Played, demo_memory, serve

from memory import Memory
from memory.ui.style import LAYER_COLOURS
from storage import Database

#: The browser: ``STRATAMEM_CHROMIUM``, else ``chromium`` on the PATH (Debian's package).
CHROMIUM_ENV = "STRATAMEM_CHROMIUM"


def chromium_path() -> str:
    """The system Chromium to drive; a clear failure when there is none."""
    found = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium")
    if not found:
        pytest.fail(
            "no Chromium: install Debian's package (`apt-get install -y chromium`; .ci/run "
            f"does) or name the executable in {CHROMIUM_ENV}"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, the system's (root needs --no-sandbox: Chromium refuses otherwise)."""
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=args
        )
        yield launched
        launched.close()


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
def tab(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookie) and page; console errors and dialogs recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    yield page
    context.close()


def colours_in(browser: Browser, png: bytes, colours: dict[str, str]) -> dict[str, int]:
    """How many pixels of a screenshot have each colour (``#rrggbb``, within 8 per channel),
    and under ``"distinct"`` how many distinct colours it has: decoded by the browser."""
    context = browser.new_context()
    try:
        page = context.new_page()
        counted: dict[str, int] = page.evaluate(
            """async ([data, colours]) => {
                const image = new Image();
                image.src = "data:image/png;base64," + data;
                await image.decode();
                const canvas = document.createElement("canvas");
                canvas.width = image.width;
                canvas.height = image.height;
                const drawing = canvas.getContext("2d");
                drawing.drawImage(image, 0, 0);
                const pixels = drawing.getImageData(0, 0, image.width, image.height).data;
                const wanted = Object.entries(colours).map(([name, hex]) => [
                    name, [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16))]);
                const counts = Object.fromEntries(wanted.map(([name]) => [name, 0]));
                const distinct = new Set();
                for (let at = 0; at < pixels.length; at += 4) {
                    const [r, g, b] = [pixels[at], pixels[at + 1], pixels[at + 2]];
                    distinct.add((r << 16) | (g << 8) | b);
                    for (const [name, [wr, wg, wb]] of wanted) {
                        if (Math.abs(r - wr) <= 8 && Math.abs(g - wg) <= 8
                            && Math.abs(b - wb) <= 8) counts[name] += 1;
                    }
                }
                counts.distinct = distinct.size;
                return counts;
            }""",
            [base64.b64encode(png).decode(), colours],
        )
        return counted
    finally:
        context.close()


def shoot(page: Page, shots: Path, name: str) -> bytes:
    """A full-page screenshot, kept as ``shots/name.png``."""
    return page.screenshot(path=shots / f"{name}.png", full_page=True)


def log_in(tab: Page, site: str, key: str, target: str) -> None:
    """Open ``target``: the page asks for a key, takes the admin key, and goes on to it."""
    tab.goto(site + target)
    expect(tab.locator("form#login")).to_be_visible()
    tab.fill("input[name=key]", key)
    tab.click("form#login button[type=submit]")
    expect(tab.locator("form#login")).to_have_count(0)


@pytest.mark.slow
def test_a_browser_walks_users_session_memory_summary_and_a_confirmed_action(
    browser: Browser,
    tab: Page,
    site: str,
    admin_key: str,
    played: Played,
    page_memory: Memory,
    tmp_path: Path,
) -> None:
    user_id = played.user_id
    errors: list[str] = []
    tab.on("console", lambda message: _console_error(message, errors))
    log_in(tab, site, admin_key, "/")

    # Users: find the demo's user by part of its id, open it.
    tab.fill("form.search input[name=q]", user_id.upper())  # found case-insensitively
    tab.click("form.search button[type=submit]")
    expect(tab.locator("#users tr.user")).to_have_count(1)
    home = shoot(tab, tmp_path, "1-users")
    tab.click(f"#users a:text-is('{user_id}')")
    expect(tab.locator("#sessions tr.session")).to_have_count(len(played.sessions) + 1)
    expect(tab.locator("#pins")).to_contain_text("Never restart the payments database")

    # A session: the stacked bar of layers per request, drops, recalled memories with scores.
    tab.click("#sessions a:text-is('s3')")
    expect(tab.locator("#chart svg rect[data-layer]").first).to_be_visible()
    for layer in ("system", "summary", "memories", "window"):
        assert tab.locator(f"#chart svg rect[data-layer={layer}]").count() > 0, layer
    latest = tab.locator("section.report").first
    expect(latest.locator("table.layers")).to_be_visible()
    expect(tab.locator("section.report tr.recalled").first).to_be_visible()
    scores = tab.locator("section.report tr.recalled td.num").all_inner_texts()
    assert "pin" in scores
    assert any(re.fullmatch(r"-?\d+\.\d{3}", score) for score in scores), scores
    assert (
        tab.locator("section.report tr.drop").count()
        + tab.locator("section.report p:text('The hard cap dropped nothing.')").count()
        == tab.locator("section.report").count()
    )  # each report says what it dropped
    expect(tab.locator("#boundary")).to_have_count(1)  # the summary boundary in the messages
    session_shot = shoot(tab, tmp_path, "2-session")
    # The bars alone (not the legend): the layers that fill the demo's requests are drawn in
    # their colours (an input is a pixel high: not counted).
    chart_shot = tab.locator("#chart svg").screenshot(path=tmp_path / "2-chart.png")
    in_chart = colours_in(browser, chart_shot, LAYER_COLOURS | {"budget": "#dc2626"})
    for layer in ("system", "summary", "memories", "window"):
        assert in_chart[layer] > 20, f"no {layer} in the chart: {in_chart} ({tmp_path})"
    assert in_chart["budget"] > 20, f"no budget line: {in_chart} ({tmp_path})"

    # Long-term memory: cards with validity, a supersede chain, pins, a search with scores.
    tab.click("a:text('long-term memory of the user')")
    expect(tab.locator("#cards article.card").first).to_be_visible()
    expect(tab.locator("#cards dt:text-is('valid')").first).to_be_visible()
    chain = tab.locator("#chains .chain").first
    expect(chain).to_contain_text("superseded")
    expect(chain.locator(".badge.current")).to_have_count(1)
    expect(tab.locator("#cards .badge.pin").first).to_be_visible()
    tab.fill("form#search input[name=q]", "Where does the user live?")
    tab.click("form#search button[type=submit]")
    expect(tab.locator("#hits article.card").first).to_be_visible()
    expect(tab.locator("#hits .badge.score").first).to_contain_text("score")
    memory_shot = shoot(tab, tmp_path, "3-memory")

    # Summary versions: the current one and what each covered.
    tab.goto(site + f"/user?user={user_id}")
    tab.click("#sessions tr.session:has(a:text-is('s3')) a[href^='/summary']")
    expect(tab.locator("section.report[id^=v]").first).to_contain_text("(current)")
    expect(tab.locator("section.report a[href*='#m']").first).to_be_visible()
    summary_shot = shoot(tab, tmp_path, "4-summary")

    # An action with its confirmation: unpin the pin, then pin it again.
    [pin] = page_memory.pins(user_id=user_id)
    tab.goto(site + f"/card?user={user_id}&card={pin.id}")
    tab.click(f"#card-{pin.id} a:text('unpin…')")
    expect(tab.locator("form#confirm")).to_contain_text("Unpin")
    assert [card.id for card in page_memory.pins(user_id=user_id)] == [pin.id]  # not yet
    confirm_shot = shoot(tab, tmp_path, "5-confirm")
    tab.click("form#confirm button[type=submit]")
    expect(tab.locator("#done")).to_contain_text(f"Unpinned card {pin.id}")
    assert page_memory.pins(user_id=user_id) == []
    tab.goto(site + f"/card?user={user_id}&card={pin.id}")
    tab.click(f"#card-{pin.id} a:text('pin…')")
    tab.click("form#confirm button[type=submit]")
    expect(tab.locator("#done")).to_be_visible()
    assert [card.text for card in page_memory.pins(user_id=user_id)] == [pin.text]

    for name, shot in [
        ("1-users", home),
        ("2-session", session_shot),
        ("3-memory", memory_shot),
        ("4-summary", summary_shot),
        ("5-confirm", confirm_shot),
    ]:
        assert colours_in(browser, shot, {})["distinct"] > 20, f"{name} is blank ({tmp_path})"
    assert errors == []


@pytest.mark.slow
def test_a_browser_forgets_a_card_only_after_confirming(
    tab: Page, site: str, admin_key: str, ui_database: Database, tmp_path: Path
) -> None:
    mem = demo_memory(ui_database)
    user_id = f"forget-{os.urandom(4).hex()}"
    kept = mem.pin(user_id=user_id, text="The staging password rotates on Mondays.")
    gone = mem.pin(user_id=user_id, text="Lunch is at noon.")
    log_in(tab, site, admin_key, f"/memory?user={user_id}")

    tab.click(f"#card-{gone.id} a:text('forget…')")
    expect(tab.locator(".note")).to_contain_text("Lunch is at noon.")
    tab.click("form#confirm a:text('Cancel')")
    still = [card.id for card in mem.pins(user_id=user_id)]
    tab.click(f"#card-{gone.id} a:text('forget…')")
    tab.click("form#confirm button[type=submit]")
    expect(tab.locator("#done")).to_contain_text(f"Forgot card {gone.id}")
    shoot(tab, tmp_path, "forgotten")

    assert sorted(still) == sorted([kept.id, gone.id])
    assert [card.id for card in mem.pins(user_id=user_id)] == [kept.id]


@pytest.mark.slow
def test_a_stored_script_is_shown_as_text_and_never_runs(
    browser: Browser, tab: Page, site: str, admin_key: str, played: Played, tmp_path: Path
) -> None:
    log_in(tab, site, admin_key, f"/session?user={played.user_id}&session={played.script_session}")

    expect(tab.locator("#messages")).to_contain_text(SCRIPT.split("<b>")[0])
    shot = shoot(tab, tmp_path, "script")

    assert tab.evaluate("window.pwned") is None
    assert tab.title() != "pwned"
    assert tab.locator("#messages b").count() == 0  # the stored <b> is text too
    assert tab.locator("script").count() == 0
    assert "<script>window.pwned = 1;" in tab.locator("#messages").inner_text()
    assert colours_in(browser, shot, {})["distinct"] > 20


def _console_error(message: ConsoleMessage, errors: list[str]) -> None:
    if message.type == "error":
        errors.append(message.text)
