"""The pages over HTTP, in process (the same ASGI app ``engine serve --transport http`` runs, with
its lifespan, a real Router, a DuckDB store and a real workspace): what they show, what they
refuse, and the auth and CSRF rules. The browser drives the same pages in test_browser.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from nacl.signing import SigningKey
from starlette.testclient import TestClient

from engine.receipts import sign
from engine.serve import RouterTools
from engine.store import EventQuery
from tests.ui.support import (
    IMG_PROBE,
    PROBE_FILE,
    PROBE_QUESTION,
    SCRIPT_PROBE,
    ask,
    build_config,
    build_workspace,
    change_priors,
    csrf_of,
    in_process,
    index,
)

HTML = {"accept": "text/html"}


@dataclass
class Site:
    ws: Path
    config: Path
    client: TestClient
    opened: list[RouterTools]

    @property
    def tools(self) -> RouterTools:
        return self.opened[-1]

    def flush(self) -> None:
        self.tools.router.flush()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("pages")
    ws, config = build_workspace(root), build_config(root)
    index(ws, config)
    with in_process(ws, config) as (client, opened):
        yield Site(ws, config, client, opened)


def items_of(html: str) -> list[str]:
    return re.findall(r'<li class="item" id="item-([0-9a-f]+)">', html)


# ---------------------------------------------------------------------------------------------- Ask
def test_ask_shows_ranked_items_with_tiers_lanes_snippets_and_confidence(site: Site) -> None:
    rid = ask(site.client, "where is the FileSystemStorage class that saves uploaded files")
    html = site.client.get(f"/answer/{rid}").text
    ids = items_of(html)
    assert len(ids) >= 2
    ranks = [int(r) for r in re.findall(r'<span class="rank">#(\d+)</span>', html)]
    assert ranks == list(range(1, len(ranks) + 1))
    assert re.search(r'class="tier tier-(hybrid-confirmed|lexical-exact|single-source)"', html)
    assert "Found by:" in html and re.search(r'<span class="src">(bm25|ripgrep) <span class="src-rank">rank 1', html)
    assert "Confidence:" in html and "on the dev questions" in html.lower()
    assert 'href="/file?project=alpha&amp;path=alpha%2Fstorage.py' in html
    assert "class FileSystemStorage" in html  # the snippet
    body = site.tools.router.store.get_receipt(rid)
    assert body is not None and [r["id"] for r in body["returned"]] == ids  # the page shows what was receipted
    assert f'href="/receipts/{rid}"' in html


def test_separate_mode_shows_one_lane_per_expert(site: Site) -> None:
    rid = ask(site.client, "FileSystemStorage", mode="separate")
    html = site.client.get(f"/answer/{rid}").text
    lanes = re.findall(r'<section class="lane" id="lane-([a-z0-9_-]+)"', html)
    body = site.tools.router.store.get_receipt(rid)
    assert body is not None and len(lanes) >= 2 and set(lanes) == set(body["per_expert"])
    assert "tier tier-" not in html  # separate mode: each expert's own list, no cross-expert tiers


def test_scope_budget_and_limit_reach_the_request(site: Site) -> None:
    rid = ask(site.client, "RetryPolicy", project="beta", language="javascript", budget_ms="4000", limit="2")
    body = site.tools.router.store.get_receipt(rid)
    assert body is not None
    assert body["request"]["scope"] == {"project": "beta", "language": "javascript"}
    assert body["request"]["budget"]["latency_ms"] == 4000 and body["request"]["limit"] == 2
    html = site.client.get(f"/answer/{rid}").text
    assert 0 < len(items_of(html)) <= 2 and "alpha/" not in "".join(re.findall(r'class="loc"[^>]*>([^<]*)<', html))


def test_a_bad_field_is_answered_with_a_receipted_invalid_request(site: Site) -> None:
    rid = ask(site.client, "RetryPolicy", path="../../etc")
    html = site.client.get(f"/answer/{rid}").text
    assert "invalid_request" in html and "scope.path" in html
    body = site.tools.router.store.get_receipt(rid)
    assert body is not None and body["status"] == "invalid_request"


# ---------------------------------------------------------------------------------------------- escaping
def test_questions_paths_and_file_content_are_escaped(site: Site) -> None:
    rid = ask(site.client, PROBE_QUESTION)
    pages = {
        "answer": site.client.get(f"/answer/{rid}").text,
        "receipt": site.client.get(f"/receipts/{rid}").text,
        "file": site.client.get(f"/file?project=probe&path={quote(PROBE_FILE)}&start=1&end=2").text,
    }
    assert urlencode({"path": PROBE_FILE}).replace("&", "&amp;") in pages["answer"]  # found and linked
    for name, html in pages.items():
        assert SCRIPT_PROBE not in html and IMG_PROBE not in html and "<img" not in html, name
        assert "&lt;script&gt;window.__xss=2&lt;/script&gt;" in html, name
    assert "probe_&#34;&gt;&lt;img src=x onerror=window.__xss=3&gt;.py" in pages["file"]


# ---------------------------------------------------------------------------------------------- file view
def test_file_view_highlights_the_lines(site: Site) -> None:
    html = site.client.get("/file?project=alpha&path=alpha/storage.py&start=4&end=6").text
    assert '<tr id="L4" class="hl">' in html and '<tr id="L6" class="hl">' in html
    assert '<tr id="L3">' in html and '<tr id="L7">' in html
    assert "class FileSystemStorage:" in html


@pytest.mark.parametrize(
    ("project", "path", "why"),
    [
        ("alpha", ".env", "hidden"),
        ("alpha", "deploy/id_rsa", "secrets policy"),
        ("alpha", "notes/leak.txt", "secrets policy"),  # content: an AWS key
        ("alpha", "passwd_link.txt", "outside the project"),  # symlink to /etc/passwd
        ("alpha", "../beta/beta/client.js", "inside the project"),
        ("alpha", "/etc/passwd", "inside the project"),
        ("alpha", "alpha/../../beta/beta/retry.js", "inside the project"),
        ("alpha", "build/generated.py", "excluded"),
        ("alpha", "debug.log", "ignored by git"),
        ("alpha", ".git/config", "private"),
        ("alpha", ".engine/signing_key.ed25519", "private"),
        ("alpha", "alpha/nope.py", "no such file"),
        ("alpha", "gitcfg.txt", "private"),  # a symlink into .git
        ("alpha", "hidden_link.txt", "hidden"),  # a symlink into a hidden folder
        ("alpha", "alpha/storage.py\x00", "inside the project"),
        ("nope", "alpha/storage.py", "no such project"),
    ],
)
def test_file_view_refuses_what_no_expert_may_return(site: Site, project: str, path: str, why: str) -> None:
    res = site.client.get(f"/file?project={project}&path={quote(path)}")
    assert res.status_code == 404
    assert why in res.text
    for secret in ("root:x:0:0", "super-secret", "AKIAABCDEFGHIJKLMNOP", "OPENSSH PRIVATE", "generated copy"):
        assert secret not in res.text


# ---------------------------------------------------------------------------------------------- feedback
def test_feedback_is_csrf_protected_and_held_to_the_receipt(site: Site) -> None:
    c = site.client
    rid = ask(c, "RetryPolicy should_retry")
    item = items_of(c.get(f"/answer/{rid}").text)[0]
    csrf = csrf_of(c)
    form = {"receipt_id": rid, "item_id": item, "verdict": "useful"}
    json_accept = {"accept": "application/json"}
    assert c.post("/feedback", data=form).status_code == 403  # no CSRF field
    assert c.post("/feedback", data={**form, "csrf": "0" * 64}).status_code == 403  # not this browser's
    cross = c.post("/feedback", data={**form, "csrf": csrf}, headers={"origin": "http://evil.example"})
    assert cross.status_code == 403
    other = c.post("/feedback", data={**form, "csrf": csrf, "item_id": "f" * 16}, headers=json_accept)
    assert other.status_code == 400 and other.json()["error"] == "invalid_request"
    missing = c.post("/feedback", data={**form, "csrf": csrf, "receipt_id": "0" * 32}, headers=json_accept)
    assert missing.status_code == 400 and "no receipt" in missing.json()["message"]
    assert site.tools.router.store.list_feedback(rid) == []
    ok = c.post("/feedback", data={**form, "csrf": csrf}, headers=json_accept)
    assert ok.status_code == 200 and ok.json()["verdict"] == "useful"
    back = c.post("/feedback", data={**form, "csrf": csrf, "verdict": "not_useful", "back": f"/answer/{rid}"})
    assert back.status_code == 303 and back.headers["location"] == f"/answer/{rid}"
    stored = site.tools.router.store.list_feedback(rid)
    assert [(f.useful_item_ids, f.not_useful_item_ids) for f in stored] == [((item,), ()), ((), (item,))]
    assert "Recorded: not useful" in c.get(f"/answer/{rid}").text  # the latest verdict
    offsite = c.post("/feedback", data={**form, "csrf": csrf, "back": "//evil.example/x"})
    assert offsite.headers["location"] == f"/receipts/{rid}"  # never an open redirect


# ---------------------------------------------------------------------------------------------- receipts
def test_receipt_page_verifies_against_pinned_keys_only(site: Site) -> None:
    c, store = site.client, site.tools.router.store
    rid = ask(c, "FileSystemStorage save")
    html = c.get(f"/receipts/{rid}").text
    assert "Signature verified" in html and "Signature failed" not in html
    raw = c.get(f"/receipts/{rid}/json")
    assert raw.headers["content-type"].startswith("application/json") and raw.json() == store.get_receipt(rid)
    body = store.get_receipt(rid)
    assert body is not None
    forged = sign({**body, "receipt_id": "f" * 32}, SigningKey.generate())  # valid signature, foreign key
    edited = {**body, "receipt_id": "e" * 32}  # our key named, signature no longer matches
    store.put_receipt(forged)
    store.put_receipt(edited)
    assert "Signature failed" in (page := c.get(f"/receipts/{'f' * 32}").text) and "not pinned" in page
    assert "signature does not verify" in c.get(f"/receipts/{'e' * 32}").text
    assert c.get(f"/receipts/{'0' * 32}").status_code == 404


def test_receipt_list_filters(site: Site) -> None:
    c, store = site.client, site.tools.router.store
    ask(c, "how do I upload a file with UploadClient")
    rows = store.list_receipts()
    klass = next(r.klass for r in rows if r.klass)
    html = c.get(f"/receipts?class={klass}&limit=500").text
    shown = re.findall(r'<a href="/receipts/([0-9a-f]{32})">', html)
    assert shown and all(store.get_receipt(r)["classifier"]["class"] == klass for r in shown)
    bad = c.get("/receipts?status=invalid_request").text
    assert re.findall(r'<a href="/receipts/([0-9a-f]{32})">', bad) == [
        r.receipt_id for r in store.list_receipts() if r.status == "invalid_request"
    ]
    assert "No receipts match." in c.get("/receipts?since=2999-01-01T00:00").text
    assert c.get("/receipts?since=yesterday").status_code == 400


# ---------------------------------------------------------------------------------------------- stats
def test_stats_show_the_store_numbers_and_inline_svg(site: Site) -> None:
    site.flush()
    html = site.client.get("/stats?window=all").text
    for s in site.tools.router.store.expert_stats(EventQuery()):
        row = re.search(rf'<th scope="row">{s.expert_id}</th>\s*<td class="num">(\d+)</td>', html)
        assert row is not None and int(row.group(1)) == s.count
    assert html.count("<svg") >= 5 and '<rect class="s0"' in html and "Class mix" in html
    mix = site.tools.router.store.receipt_mix()
    assert f"{mix.total} receipts" in html


# ---------------------------------------------------------------------------------------------- config
def test_config_versions_seen_in_receipts_and_git_revisions_can_be_diffed(tmp_path: Path) -> None:
    ws, config = build_workspace(tmp_path), build_config(tmp_path)
    with in_process(ws, config) as (c, opened):
        before = ask(c, "RetryPolicy")
        change_priors(config, "ripgrep: 0.9", "ripgrep: 0.55", "trust ripgrep less for identifiers")
        after = ask(c, "RetryPolicy")
        opened[-1].router.flush()
        store = opened[-1].router.store
        va, vb = (store.get_receipt(r)["config_version"] for r in (before, after))
        assert va != vb
        page = c.get("/config").text
        assert va[:16] in page and vb[:16] in page and "hash differs" not in page
        for a, b in ((f"v:{va}", f"v:{vb}"), ("rev:HEAD~1", "rev:HEAD"), (f"v:{va}", "current")):
            diff = c.get(f"/config/diff?a={quote(a)}&b={quote(b)}")
            assert diff.status_code == 200, diff.text
            assert re.search(r"<del>0\.9</del> → <ins>0\.55</ins>", diff.text), (a, b)
        same = c.get(f"/config/diff?a=v:{vb}&b=current").text
        assert "<ins>" not in same and same.count('class="unchanged"') == 3
        for side in ("/etc", str(config), "rev:--output=/tmp/x", "rev:HEAD..main", "v:nope", "file:/etc/passwd"):
            res = c.get(f"/config/diff?a={quote(side)}&b=current")
            assert res.status_code in (400, 404), side


# ---------------------------------------------------------------------------------------------- auth
def test_a_host_that_is_not_loopback_is_refused(site: Site) -> None:
    res = site.client.get("/", headers={"host": "evil.example", **HTML})
    assert res.status_code == 421
    assert site.client.get("/", headers={"host": "localhost:8765"}).status_code == 200
    for host in ("[::1]evil.com", "localhost:x@evil.com", "127.0.0.1:80x"):  # found by an exploratory run
        assert site.client.get("/", headers={"host": host}).status_code == 421, host


@pytest.mark.parametrize(
    "url",
    [
        "/file?project=alpha&path=alpha/storage.py&start=%C2%B2",  # "²" passes str.isdigit, not int()
        "/file?project=alpha&path=alpha/storage.py&end=" + "9" * 5000,  # past int()'s digit limit
        "/receipts?limit=%C2%B3",
        "/receipts?since=0001-01-01T00:00%2B01:00",  # no UTC datetime for it
        "/receipts?until=9999-12-31T23:59-01:00",
    ],
)
def test_odd_numbers_and_times_are_answered_not_500(site: Site, url: str) -> None:
    """Found by an exploratory run: each of these was a 500 from the server."""
    assert site.client.get(url).status_code in (200, 400)


def test_the_ask_form_takes_pipeline_names_only(site: Site) -> None:
    """Found by an exploratory run: the form's pipeline field went to a file-existence check, an
    oracle for any path on the server (`/etc/shadow` and a missing file answered differently)."""
    csrf = site.client.cookies.get("engine_csrf") or site.client.get("/ask").cookies["engine_csrf"]
    for pipeline in ("/etc/shadow", "/root/.ssh/nonexist", "x" * 5000):
        res = site.client.post("/ask", data={"csrf": csrf, "question": "where is storage", "pipeline": pipeline})
        assert res.status_code == 400 and "unknown pipeline" in res.text and "shadow is not" not in res.text


def test_token_mode_login_cookie_and_bearer(tmp_path: Path) -> None:
    ws, config = build_workspace(tmp_path), build_config(tmp_path)
    with in_process(ws, config, token="s3cret") as (c, _):
        res = c.get("/stats?window=1h", headers=HTML)
        assert res.status_code == 303 and res.headers["location"] == "/login?next=%2Fstats%3Fwindow%3D1h"
        assert c.get("/stats").status_code == 401
        assert c.get("/stats", headers={"authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/stats", headers={"authorization": "Bearer guess"}).status_code == 401
        assert c.get("/static/style.css").status_code == 200  # the login page's stylesheet is public
        login = c.get("/login?next=/stats", headers=HTML)
        assert login.status_code == 200 and 'type="password"' in login.text
        csrf = c.cookies["engine_csrf"]
        wrong = c.post("/login", data={"csrf": csrf, "token": "guess", "next": "/stats"})
        assert wrong.status_code == 401 and "engine_session" not in c.cookies
        assert c.post("/login", data={"token": "s3cret", "next": "/stats"}).status_code == 403  # no CSRF field
        ok = c.post("/login", data={"csrf": csrf, "token": "s3cret", "next": "/stats"})
        assert ok.status_code == 303 and ok.headers["location"] == "/stats"
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith("engine_session=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert c.get("/stats").status_code == 200  # the session cookie alone
        mcp = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert c.post("/mcp", content=json.dumps(init), headers=mcp).status_code == 401  # MCP: bearer only
        with_bearer = c.post("/mcp", content=json.dumps(init), headers={**mcp, "authorization": "Bearer s3cret"})
        assert with_bearer.status_code != 401
        kept = c.cookies["engine_session"]
        out = c.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
        c.cookies.delete("engine_session")
        assert c.get("/stats").status_code == 401
        # a copy of the cookie kept from before the logout no longer works (found by an exploratory run)
        c.cookies.set("engine_session", kept)
        assert c.get("/stats").status_code == 401
        c.cookies.set("engine_session", "9" * 5000 + ".a.b")
        assert c.get("/login").status_code == 200  # was a 500
        c.cookies.delete("engine_session")
        assert c.post("/login", data={"csrf": csrf, "token": " s3cret", "next": "/"}).status_code == 401  # exact
