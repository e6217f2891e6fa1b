"""The pages in a real browser: Debian's headless Chromium driven by Playwright's Python API,
against ``engine serve --transport http`` run as a process over a real, indexed workspace.

Ask a question and see ranked results with tiers; open the receipt and see it verified; send
feedback and see it in the stats; compare two config versions and two git revisions; the XSS
probes (in a file's content, a file name and the question) stay inert with the CSP switched off,
so escaping alone is what is tested; every page fits a 375 px screen and the Ask page works by
keyboard alone. Each page's screenshot is taken (written to docs/ui/, shown in docs/ui.md, by `make ui-shots`).

``make test`` installs Chromium (``make browser``) and sets ENGINE_REQUIRE_BROWSER=1, so there
these tests run or fail; elsewhere they are skipped when Chromium or Playwright is missing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ui.support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    IMG_PROBE,
    PROBE_FILE,
    PROBE_QUESTION,
    SCRIPT_PROBE,
    SHOTS,
    build_config,
    build_workspace,
    change_priors,
    engine_serve,
    index,
)

_missing = [what for what, ok in (("/usr/bin/chromium", os.path.exists(CHROMIUM)),) if not ok]
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # the `browser` extra is not installed
    _missing.append("playwright (pip install -e '.[browser]')")
if _missing and not os.environ.get("ENGINE_REQUIRE_BROWSER"):
    pytest.skip(f"browser tests need {', '.join(_missing)}: run `make browser`", allow_module_level=True)

pytestmark = pytest.mark.browser

TIERS = {
    "typed-graph-confirmed",
    "hybrid-confirmed",
    "semantic-only",
    "docs",
    "history",
    "lexical-exact",
    "single-source",
    "stale-index",
}
QUESTION = "where is the FileSystemStorage class that saves uploaded files"


@dataclass
class Served:
    base: str
    ws: Path
    config: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("browser")
    ws, config = build_workspace(root), build_config(root)
    index(ws, config)
    with engine_serve(ws, config) as base:
        yield Served(base, ws, config)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"script errors on the page: {errors}"


def shot(pg: Page, name: str, *, full: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)


def ask(pg: Page, base: str, question: str, *, separate: bool = False) -> str:
    pg.goto(f"{base}/")
    pg.get_by_label("Question").fill(question)
    if separate:
        pg.get_by_label("separate: each expert's own list").check()
    pg.get_by_role("button", name="Ask", exact=True).click()
    pg.wait_for_url(re.compile(r"/answer/[0-9a-f]{32}$"))
    return pg.url.rsplit("/", 1)[1]


# ---------------------------------------------------------------------------------------------- Ask
def test_ask_shows_ranked_results_with_tiers_and_opens_the_lines(served: Served, page: Page) -> None:
    ask(page, served.base, QUESTION)
    items = page.locator("li.item")
    expect(items.first).to_be_visible()
    n = items.count()
    assert n >= 2
    assert page.locator(".item .rank").all_inner_texts() == [f"#{i}" for i in range(1, n + 1)]
    tiers = page.locator(".item .tier").all_inner_texts()
    assert len(tiers) == n and set(tiers) <= TIERS
    expect(page.locator(".confidence")).to_contain_text("Confidence:")
    expect(page.locator(".item .found-by").first).to_contain_text("rank")
    expect(page.locator(".item .snippet").first).not_to_be_empty()
    shot(page, "ask")
    first = page.locator(".item a.loc").first
    where = first.inner_text()  # alpha/alpha/storage.py:4–4
    first.click()
    page.wait_for_url(re.compile(r"/file\?"))
    expect(page.locator("tr.hl").first).to_be_visible()
    start = int(where.rsplit(":", 1)[1].split("–")[0])
    expect(page.locator(f"#L{start}")).to_have_class("hl")
    shot(page, "file", full=False)


def test_separate_mode_shows_one_column_per_expert(served: Served, page: Page) -> None:
    ask(page, served.base, "FileSystemStorage", separate=True)
    lanes = page.locator("section.lane")
    assert lanes.count() >= 2
    names = page.locator("section.lane h3").all_inner_texts()
    assert len(set(names)) == len(names)
    expect(page.locator(".lane-nav a").first).to_be_visible()
    shot(page, "ask-separate")


# ---------------------------------------------------------------------------------------------- receipts
def test_the_receipt_of_an_answer_is_verified(served: Served, page: Page) -> None:
    rid = ask(page, served.base, QUESTION)
    page.locator("a.receipt-link").click()
    page.wait_for_url(f"**/receipts/{rid}")
    expect(page.locator(".badge")).to_have_text(re.compile(r"^Signature verified"))
    expect(page.locator(".badge")).to_have_class(re.compile(r"\bok\b"))
    expect(page.locator(".question-text")).to_have_text(QUESTION)
    shot(page, "receipt")
    page.get_by_role("link", name="Raw JSON").click()
    raw = json.loads(page.evaluate("document.body.innerText"))
    assert raw["receipt_id"] == rid and raw["signature"] and raw["returned"]
    page.goto(f"{served.base}/receipts")
    klass = raw["classifier"]["class"]
    page.get_by_label("Class").select_option(klass)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(rf"class={klass}"))
    rows = page.locator("table.data tbody tr")
    assert rows.count() >= 1
    assert set(page.locator("table.data tbody tr td:nth-child(2)").all_inner_texts()) == {klass}
    shot(page, "receipts")


# ---------------------------------------------------------------------------------------------- feedback → stats
def test_feedback_is_sent_and_shows_in_stats(served: Served, page: Page) -> None:
    page.goto(f"{served.base}/stats?window=1h")
    before = int(page.locator("#fb-useful").inner_text())
    ask(page, served.base, "RetryPolicy should_retry backoff")
    url = page.url
    first, second = page.locator("li.item").nth(0), page.locator("li.item").nth(1)
    first.get_by_role("button", name="Useful", exact=True).click()
    expect(first.locator("output")).to_have_text("Recorded: useful")
    second.get_by_role("button", name="Not useful").click()
    expect(second.locator("output")).to_have_text("Recorded: not useful")
    assert page.url == url  # sent in the background: the answer stays
    page.reload()
    expect(first.locator("output")).to_have_text("Recorded: useful")  # read back from the store
    page.goto(f"{served.base}/stats?window=1h")
    expect(page.locator("#fb-useful")).to_have_text(str(before + 1))
    expect(page.locator("#chart-feedback svg")).to_be_visible()
    rows = page.locator("#expert-stats tbody tr")
    marked = [r for r in rows.all_inner_texts() if re.search(r"\b[1-9]\d* / \d+$|\b\d+ / [1-9]\d*$", r)]
    assert marked, rows.all_inner_texts()
    assert page.locator("#chart-calls rect").count() >= 2
    shot(page, "stats")


# ---------------------------------------------------------------------------------------------- config
def test_two_config_versions_and_two_revisions_are_diffed(served: Served, page: Page) -> None:
    before = ask(page, served.base, "RetryPolicy")
    change_priors(served.config, "ripgrep: 0.9", "ripgrep: 0.55", "trust ripgrep less for identifiers")
    after = ask(page, served.base, "RetryPolicy")
    versions = [
        httpx.get(f"{served.base}/receipts/{r}/json", timeout=10).json()["config_version"] for r in (before, after)
    ]
    assert versions[0] != versions[1]
    for _ in range(50):  # the new version's snapshot is written after the answer, off the hot path
        page.goto(f"{served.base}/config")
        if page.locator(f'#d-a option[value="v:{versions[1]}"]').count():
            break
        page.wait_for_timeout(200)
    page.get_by_label("From", exact=True).select_option(f"v:{versions[0]}")
    page.get_by_label("To", exact=True).select_option(f"v:{versions[1]}")
    shot(page, "config")
    page.get_by_role("button", name="Compare versions").click()
    page.wait_for_url(re.compile(r"/config/diff\?"))
    change = page.locator("li.changed", has_text="ripgrep")
    expect(change.first).to_contain_text("0.9")
    expect(change.first.locator("ins")).to_have_text("0.55")
    shot(page, "diff")
    page.goto(f"{served.base}/config")
    page.get_by_role("button", name="Compare revisions").click()
    page.wait_for_url(re.compile(r"/config/diff\?"))
    expect(page.locator("li.changed", has_text="ripgrep").first.locator("ins")).to_have_text("0.55")


# ---------------------------------------------------------------------------------------------- XSS
def test_xss_probes_stay_inert(served: Served, browser: Browser) -> None:
    context = browser.new_context(bypass_csp=True)  # escaping alone must hold, not the CSP behind it
    pg = context.new_page()
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    def inert() -> None:
        state: dict[str, Any] = pg.evaluate(
            "({xss: window.__xss, imgs: document.images.length,"
            " scripts: [...document.scripts].map(s => s.src || 'inline')})"
        )
        assert state["xss"] is None and state["imgs"] == 0, state
        assert all(s.endswith("/static/ui.js") for s in state["scripts"]), state

    try:
        rid = ask(pg, served.base, PROBE_QUESTION)
        inert()
        expect(pg.locator(".question-text")).to_contain_text(SCRIPT_PROBE)  # shown as text
        link = pg.locator(".item a.loc", has_text="probe_")
        expect(link.first).to_contain_text(PROBE_FILE)
        expect(pg.locator(".snippet", has_text=IMG_PROBE).first).to_be_visible()  # content shown as text
        link.first.click()
        pg.wait_for_url(re.compile(r"/file\?"))
        inert()
        expect(pg.locator("h1")).to_have_text(f"probe/{PROBE_FILE}")
        pg.goto(f"{served.base}/receipts/{rid}")
        inert()
        expect(pg.locator(".question-text")).to_have_text(PROBE_QUESTION)
        assert dialogs == []
    finally:
        context.close()


# ---------------------------------------------------------------------------------------------- small screens, keyboard
def test_pages_fit_375px_and_ask_works_by_keyboard(served: Served, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 375, "height": 812})
    pg = context.new_page()
    try:
        pg.goto(f"{served.base}/")
        order = []
        for _ in range(14):
            pg.keyboard.press("Tab")
            order.append(pg.evaluate("document.activeElement.id || document.activeElement.textContent.trim()"))
        assert order == [
            "Skip to content", "Ask", "Receipts", "Stats", "Config", "question", "project", "path", "language",
            "mode-fused", "budget_ms", "limit", "pipeline", "Ask",
        ]  # fmt: skip
        for _ in range(3):  # back to the budget
            pg.keyboard.press("Shift+Tab")
        pg.keyboard.type("5000")
        for _ in range(5):  # back to the question
            pg.keyboard.press("Shift+Tab")
        assert pg.evaluate("document.activeElement.id") == "question"
        pg.keyboard.type(QUESTION)
        for _ in range(8):
            pg.keyboard.press("Tab")
        assert pg.evaluate("document.activeElement.textContent.trim()") == "Ask"
        pg.keyboard.press("Enter")
        pg.wait_for_url(re.compile(r"/answer/[0-9a-f]{32}$"))
        rid = pg.url.rsplit("/", 1)[1]
        useful = pg.locator("li.item").first.get_by_role("button", name="Useful", exact=True)
        useful.focus()
        pg.keyboard.press("Space")
        expect(pg.locator("li.item").first.locator("output")).to_have_text("Recorded: useful")
        pg.locator(".confidence").evaluate("e => e.scrollIntoView()")
        shot(pg, "ask-375", full=False)
        pages = [
            "/",
            f"/answer/{rid}",
            "/receipts",
            f"/receipts/{rid}",
            "/stats?window=all",
            "/config",
            "/config/diff?a=rev:HEAD&b=current",
            "/file?project=alpha&path=alpha/storage.py&start=4&end=6",
        ]
        for path in pages:
            pg.goto(f"{served.base}{path}")
            if path.startswith("/stats"):
                shot(pg, "stats-375", full=False)
            width = pg.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], (path, width)
            unlabelled = pg.evaluate(
                "[...document.querySelectorAll('input:not([type=hidden]), select, textarea')]"
                ".filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.name)"
            )
            assert unlabelled == [], (path, unlabelled)
    finally:
        context.close()


# ---------------------------------------------------------------------------------------------- token mode
def test_with_a_token_the_pages_ask_for_it_once(tmp_path: Path, browser: Browser) -> None:
    ws, config = build_workspace(tmp_path), build_config(tmp_path)
    with engine_serve(ws, config, "--token", "s3cret") as base:
        context = browser.new_context()
        pg = context.new_page()
        try:
            pg.goto(f"{base}/stats")
            pg.wait_for_url(re.compile(r"/login\?next="))
            pg.get_by_label("Token").fill("guess")
            pg.get_by_role("button", name="Log in").click()
            expect(pg.locator("[role=alert]")).to_contain_text("not the server's token")
            shot(pg, "login")
            pg.get_by_label("Token").fill("s3cret")
            pg.get_by_role("button", name="Log in").click()
            pg.wait_for_url(f"{base}/stats")
            session = next(c for c in context.cookies() if c["name"] == "engine_session")
            assert session["httpOnly"] and session["sameSite"] == "Strict"
            assert pg.evaluate("document.cookie") == ""  # no script can read either cookie
            pg.goto(f"{base}/")
            expect(pg.get_by_label("Question")).to_be_visible()
        finally:
            context.close()
        mcp = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
        assert httpx.post(f"{base}/mcp", content=ping, headers=mcp).status_code == 401
        bearer = httpx.post(f"{base}/mcp", content=ping, headers={**mcp, "authorization": "Bearer s3cret"})
        assert bearer.status_code != 401
