"""The operator console in a real headless Chromium (Debian's ``chromium``, driven by
Playwright; ``make test`` installs it), against a served gateway.

Every test saves a screenshot under ``tmp/artifacts`` (``TEST_ARTIFACTS``
elsewhere) and fails on any error in the browser's console. With
``UPDATE_CONSOLE_SCREENSHOT=1`` the overview test also writes the README's
screenshot, ``docs/console-overview.png``.

The history timeline and the live row need ``GET /v1/tasks/{id}/events`` and
``GET /v1/events``; on a gateway without them (the page then calls neither) the test
that needs them is skipped, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.served import Served, start, stop

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", ROOT / "tmp" / "artifacts"))
README_SHOT = ROOT / "docs" / "console-overview.png"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# A lease that lapses a second after its last renewal: stale tasks in moments.
ENV = {"LEASEGATE_TASK_LEASE_TTL": "1", "LEASEGATE_HOUSEKEEPING_INTERVAL": "0.2",
       "LEASEGATE_LEDGER_AUDIT_INTERVAL": "0.5"}
TENANT = "default"  # the bootstrap client key's tenant
STALE = ("order-a", "order-b")
# Generous for a loaded machine (the suite runs beside other test files).
TIMEOUT_MS = 10_000
expect.set_options(timeout=TIMEOUT_MS)


def _ok(response: httpx.Response, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def _make_work(served: Served) -> None:
    """Two stale tasks (w1 started both, reported progress and a receipt for one, then
    stopped renewing), one finished task, queued work on a site no worker serves, a
    query, and money on the tenant's account."""
    client, worker = served.client("client"), served.client("worker")
    _ok(served.client("admin").post(f"/v1/ledger/accounts/{TENANT}/credit",
                                    json={"amount": 1000, "ref": "opening"}))
    for task_id, account in (*zip(STALE, ("acct-a", "acct-b"), strict=True), ("order-c", "acct-c")):
        _ok(client.post("/v1/tasks", json={"task_id": task_id, "site": "shop", "account": account,
                                           "kind": "place_order", "params": {"sku": "X1"},
                                           "max_cost": 50}), 201)
    _ok(client.post("/v1/tasks", json={"task_id": "later-1", "site": "books",
                                       "kind": "place_order"}), 201)
    _ok(client.post("/v1/queries", json={"site": "shop", "kind": "price"}), 201)
    leases = _ok(worker.post("/v1/tasks/lease", json={"worker_id": "w1", "wait_seconds": 0,
                                                      "max": 3, "sites": ["shop"]}))["items"]
    by_id = {item["task_id"]: item for item in leases}
    assert set(by_id) == {*STALE, "order-c"}
    for item in leases:
        fence = {"worker_id": "w1", "lease_token": item["lease_token"]}
        _ok(worker.post(f"/v1/tasks/{item['task_id']}/start", json=fence))
    fence_a = {"worker_id": "w1", "lease_token": by_id["order-a"]["lease_token"]}
    _ok(worker.post("/v1/tasks/order-a/renew", json={**fence_a, "progress": {"step": "paid"}}))
    _ok(worker.put("/v1/tasks/order-a/artifacts/receipt.txt", content=b"order 1234 paid",
                   headers={"X-Worker-Id": "w1", "X-Lease-Token": fence_a["lease_token"]}), 201)
    fence_c = {"worker_id": "w1", "lease_token": by_id["order-c"]["lease_token"]}
    _ok(worker.post("/v1/tasks/order-c/result",
                    json={**fence_c, "outcome": "succeeded", "result": {"order_no": "1235"},
                          "cost": 30}))
    deadline = time.monotonic() + 10
    while any(_ok(client.get(f"/v1/tasks/{t}"))["status"] != "stale" for t in STALE):
        assert time.monotonic() < deadline, "the tasks did not go stale"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start(tmp_path_factory.mktemp("console") / "var", ENV, collect_output=True)
    try:
        _make_work(served)
        yield served
    finally:
        stop(served)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def session_cookie(gateway: Served) -> dict[str, Any]:
    """A console session of the bootstrap admin, for tests that start signed in."""
    signed_in = httpx.post(gateway.url + "/console/sign-in",
                           data={"key": gateway.keys["admin"]})
    assert signed_in.status_code == 303, signed_in.text
    return {"name": "leasegate_console", "value": signed_in.cookies["leasegate_console"],
            "url": gateway.url, "httpOnly": True, "sameSite": "Strict"}


@dataclass
class Console:
    """One browser tab on the console, and what its console reported."""

    page: Page
    url: str
    errors: list[str] = field(default_factory=list)

    def go(self, path: str) -> None:
        self.page.goto(self.url + path)

    def sign_in(self, key: str) -> None:
        self.go("/console/")
        self.page.get_by_label("Admin key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()


def _open(browser: Browser, url: str, name: str, **context_args: Any) -> Iterator[Console]:
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 900},
                                     **context_args})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    console = Console(page, url)
    page.on("console", lambda message: _note(console, message))
    page.on("pageerror", lambda error: console.errors.append(f"page error: {error}"))
    try:
        yield console
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)
    finally:
        context.close()
    assert console.errors == [], console.errors


def _note(console: Console, message: ConsoleMessage) -> None:
    if message.type in ("error", "warning"):
        console.errors.append(f"{message.type}: {message.text}")


@pytest.fixture
def tab(browser: Browser, gateway: Served, request: pytest.FixtureRequest) -> Iterator[Console]:
    """A tab not signed in."""
    yield from _open(browser, gateway.url, request.node.name.removeprefix("test_"))


@pytest.fixture
def admin_tab(browser: Browser, gateway: Served, session_cookie: dict[str, Any],
              request: pytest.FixtureRequest) -> Iterator[Console]:
    """A tab signed in as the bootstrap admin."""
    for tab in _open(browser, gateway.url, request.node.name.removeprefix("test_")):
        tab.page.context.add_cookies([session_cookie])  # type: ignore[list-item]
        yield tab


def test_sign_in_shows_the_overview(tab: Console, gateway: Served) -> None:
    tab.sign_in(gateway.keys["admin"])
    page = tab.page
    expect(page.get_by_role("heading", name=re.compile("^Overview"))).to_be_visible()
    # The badge names its causes: the stale tasks, the site no worker serves.
    expect(page.locator("h1 .badge")).to_have_text(
        "degraded: 2 stale tasks, 1 site without a worker")
    stale = page.get_by_role("heading", name=re.compile("^Stale tasks"))
    expect(stale).to_contain_text("2")
    lanes = page.locator("section", has=page.get_by_role("heading", name="Blocked lanes"))
    for task_id in STALE:
        expect(lanes.get_by_role("link", name=task_id)).to_be_visible()
    queued = page.locator("section", has=page.get_by_role("heading", name="Queued by site"))
    expect(queued.locator("tr", has_text="books")).to_contain_text("none")
    expect(page.get_by_text("submits per minute")).to_contain_text("5 in all")
    chart = page.locator("figure.spark", has_text="submits per minute")
    for label in ("5 /min", "0", "−60 min", "now"):  # the axes: 0 to a round top, an hour
        expect(chart.locator("svg text", has_text=label).first).to_be_attached()
    cookie = next(c for c in page.context.cookies() if c["name"] == "leasegate_console")
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    # Keyboard: the first Tab reaches the skip link, the next ones the navigation.
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to content")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Overview")
    if os.environ.get("UPDATE_CONSOLE_SCREENSHOT") == "1":
        page.keyboard.press("Escape")
        page.locator(":focus").blur()
        README_SHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(README_SHOT), full_page=True)


def test_the_overview_fits_a_phone(browser: Browser, gateway: Served) -> None:
    for tab in _open(browser, gateway.url, "phone", viewport={"width": 390, "height": 844},
                     is_mobile=True, has_touch=True):
        tab.sign_in(gateway.keys["admin"])
        expect(tab.page.get_by_role("heading", name=re.compile("^Overview"))).to_be_visible()
        assert tab.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        tab.go("/console/tasks")
        expect(tab.page.locator("li.stale")).to_have_count(2)
        assert tab.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        # The task table stacks: every cell whole inside the screen, named by its column.
        cells = tab.page.locator("table.jobs tbody td")
        expect(cells.first).to_be_visible()
        assert tab.page.evaluate(CLIPPED_CELLS, "table.jobs") == []
        expect(tab.page.locator('table.jobs tr[data-job-id="order-c"] td[data-label="Kind"]')
               ).to_have_text("place_order")


# Cells of a table (by selector) not wholly inside the viewport, nor inside a scrolled box.
CLIPPED_CELLS = """(table) => Array.from(document.querySelectorAll(table + " td"))
  .filter((td) => { const r = td.getBoundingClientRect();
                    return r.left < 0 || r.right > window.innerWidth + 0.5 || r.width === 0; })
  .map((td) => td.textContent)"""


def test_a_stale_task_is_found_and_reclaimed_with_a_reason(admin_tab: Console,
                                                          gateway: Served) -> None:
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks")
    card = page.locator('li.stale[data-job-id="order-a"]')
    expect(card.locator("summary")).to_contain_text("w1")  # the last lease's worker
    expect(card.locator("summary")).to_contain_text("lease_expired")
    expect(card.get_by_role("button", name="Reclaim")).to_be_hidden()  # opened on demand
    card.locator("summary").click()
    expect(card).to_contain_text('"step": "paid"')
    receipt = card.get_by_role("link", name="receipt.txt")
    # The artifact downloads with the console's cookie alone.
    download = page.request.get(tab.url + str(receipt.get_attribute("href")))
    assert (download.status, download.body()) == (200, b"order 1234 paid")
    # No outcome is chosen for the operator: without one, nothing is sent.
    for outcome in ("requeue", "succeeded", "failed"):
        expect(card.get_by_label(outcome)).not_to_be_checked()
    card.get_by_role("button", name="Reclaim").click()
    assert page.evaluate("document.activeElement.name") == "action"
    card.get_by_label("requeue").check()
    # The reason is required: an empty one is not sent.
    card.get_by_role("button", name="Reclaim").click()
    assert page.evaluate("document.activeElement.name") == "reason"
    card.get_by_label("Reason").fill("checked the shop: no order was placed")
    card.get_by_role("button", name="Reclaim").click()
    expect(page.locator(".notice-ok")).to_contain_text(
        "task order-a: stale → queued (reclaimed: requeue)")
    expect(page.locator('li.stale[data-job-id="order-a"]')).to_have_count(0)
    task = _ok(gateway.client("admin").get("/v1/tasks/order-a"))
    assert task["status"] == "queued"
    assert task["reclaim"]["reason"] == "checked the shop: no order was placed"
    assert task["reclaim"]["by"].startswith("bootstrap admin (")
    page.get_by_label("Task id").fill("order-a")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", name="Task order-a")).to_be_visible()
    expect(page.locator("dl.facts").first).to_contain_text("checked the shop")


def test_history_and_lists_that_change_live(admin_tab: Console, gateway: Served) -> None:
    """A task reclaimed elsewhere leaves "Stale tasks" and the blocked lanes, its row and
    the overview's counts change, in two tabs, without a reload."""
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks")
    card = page.locator('li.stale[data-job-id="order-b"]')
    timeline = card.locator(".timeline")
    for kind in ("submitted", "leased", "started", "stale"):
        expect(timeline).to_contain_text(kind)
    overview = page.context.new_page()  # a second tab, on the overview
    overview.on("pageerror", lambda error: tab.errors.append(f"page error: {error}"))
    overview.goto(tab.url + "/console/")
    lanes = overview.locator("section", has=overview.get_by_role("heading", name="Blocked lanes"))
    expect(lanes.get_by_role("link", name="order-b")).to_be_visible()
    stale_count = overview.locator("table.counts tr", has_text="stale").locator(".num").first
    stale_before = int(stale_count.inner_text())
    for each in (page, overview):
        each.evaluate("window.stillTheSamePage = true")
    row = page.locator('table.jobs tr[data-job-id="order-b"] .status')
    expect(row).to_have_text("stale")
    _ok(gateway.client("admin").post("/v1/tasks/order-b/reclaim", json={
        "action": "failed", "reason": "the shop says the order was refused"}))
    expect(row).to_have_text("failed")
    expect(card).to_have_count(0)  # it left "Stale tasks"
    expect(lanes.get_by_role("link", name="order-b")).to_have_count(0)
    expect(stale_count).to_have_text(str(stale_before - 1))
    expect(overview.locator("#live-log")).to_contain_text("order-b reclaimed → failed")
    # A flood of events is one reading of the page, not one an event.
    reads: list[str] = []
    overview.on("request", lambda request: reads.append(request.url)
                if "x-console-refresh" in request.headers else None)
    queued = overview.locator("section", has=overview.get_by_role(
        "heading", name="Unfinished queries")).locator("tr", has_text="queued").locator(".num")
    before = int(queued.inner_text())
    _ok(gateway.client("client").post("/v1/queries/batch", json={"items": [
        {"site": "shop", "kind": "price", "params": {"n": n}} for n in range(30)]}), 200, 207)
    expect(queued).to_have_text(str(before + 30))
    assert 1 <= len(reads) <= 2, reads
    page.get_by_role("link", name="order-b").first.click()
    expect(page.locator(".timeline")).to_contain_text("reclaimed")
    assert overview.evaluate("window.stillTheSamePage") is True  # no reload
    overview.close()


def test_a_late_result_updates_every_card_of_an_open_task_page(
        browser: Browser, gateway: Served, session_cookie: dict[str, Any]) -> None:
    """The task page follows a late result (status, result, dates, billing, history),
    and the tasks page in a second tab keeps what the operator types meanwhile."""
    client, worker = gateway.client("client"), gateway.client("worker")
    for task_id, account in (("late-1", "acct-l"), ("late-2", "acct-m")):
        _ok(client.post("/v1/tasks", json={"task_id": task_id, "site": "late",
                                           "account": account, "kind": "place_order",
                                           "max_cost": 50}), 201)
    leases = _ok(worker.post("/v1/tasks/lease", json={"worker_id": "w2", "wait_seconds": 0,
                                                      "sites": ["late"], "max": 2}))["items"]
    fences = {item["task_id"]: {"worker_id": "w2", "lease_token": item["lease_token"]}
              for item in leases}
    for task_id, fence in fences.items():
        _ok(worker.post(f"/v1/tasks/{task_id}/start", json=fence))
    deadline = time.monotonic() + 10
    while any(_ok(client.get(f"/v1/tasks/{t}"))["status"] != "stale" for t in fences):
        assert time.monotonic() < deadline, "the tasks did not go stale"
        time.sleep(0.1)
    # The viewer's clock is Tokyo's: dates show in UTC all the same, said so.
    for tab in _open(browser, gateway.url, "late-result", timezone_id="Asia/Tokyo"):
        tab.page.context.add_cookies([session_cookie])  # type: ignore[list-item]
        page = tab.page
        tab.go("/console/tasks/late-1")
        facts = page.locator("dl.facts").first
        result = page.locator("section.card", has=page.get_by_role("heading", name="Result"))
        billing = page.locator("section.card", has=page.get_by_role("heading", name="Billing"))
        expect(facts.locator(".status")).to_have_text("stale")
        expect(billing.locator("dd").last).to_have_text("open")
        tasks = page.context.new_page()  # the stale tasks, an operator half-way through a form
        tasks.goto(tab.url + "/console/tasks")
        other = tasks.locator('li.stale[data-job-id="late-2"]')
        other.locator("summary").click()
        other.get_by_label("failed").check()
        other.get_by_label("Reason").fill("checking the sh")
        for each in (page, tasks):
            each.evaluate("window.stillTheSamePage = true")
        _ok(worker.post("/v1/tasks/late-1/result", json={
            **fences["late-1"], "outcome": "succeeded", "result": {"order_no": "9001"},
            "cost": 20}))
        expect(facts.locator(".status")).to_have_text("succeeded")
        expect(result).to_contain_text('"order_no": "9001"')
        expect(billing.locator("dd")).to_have_text(["50", "20", "30", "settled"])
        expect(page.locator(".timeline")).to_contain_text("settled")
        completed_at = _ok(client.get("/v1/tasks/late-1"))["completed_at"]
        utc = datetime.fromisoformat(completed_at.replace("Z", "+00:00"))
        completed = facts.locator("dt:text-is('Completed') + dd time")
        expect(completed).to_have_text(utc.strftime("%Y-%m-%d %H:%M:%S UTC"))
        expect(page.locator(".history .timeline time").first).to_have_text(
            re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
        # The other tab: late-1 left the stale tasks; late-2's form kept what was typed.
        expect(tasks.locator('li.stale[data-job-id="late-1"]')).to_have_count(0)
        expect(other.get_by_label("Reason")).to_have_value("checking the sh")
        expect(other.get_by_label("failed")).to_be_checked()
        expect(other.get_by_label("Reason")).to_be_focused()
        for each in (page, tasks):
            assert each.evaluate("window.stillTheSamePage") is True  # no reload
        tasks.close()
    _ok(gateway.client("admin").post("/v1/tasks/late-2/reclaim", json={
        "action": "failed", "reason": "cleared by the test"}))


def test_dark_mode_follows_the_colour_scheme(browser: Browser, gateway: Served,
                                             session_cookie: dict[str, Any]) -> None:
    for tab in _open(browser, gateway.url, "dark", color_scheme="dark"):
        tab.page.context.add_cookies([session_cookie])  # type: ignore[list-item]
        for path, selectors in (("/console/", ("body", "section.card", "table.counts")),
                                ("/console/tasks", ("table.jobs", "input[name=site]"))):
            tab.go(path)
            for selector in selectors:
                colour = tab.page.locator(selector).first.evaluate(
                    "(el) => getComputedStyle(el).backgroundColor")
                assert _luminance(colour) < 0.05, (path, selector, colour)
        text = tab.page.locator("body").evaluate("(el) => getComputedStyle(el).color")
        assert _luminance(text) > 0.5, text


def _luminance(css_colour: str) -> float:
    """WCAG's relative luminance (0 black .. 1 white) of an ``rgb(...)`` value."""
    found = re.match(r"rgba?\((\d+), (\d+), (\d+)", css_colour)
    assert found, css_colour
    red, green, blue = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
                        for c in (int(found[i]) / 255 for i in (1, 2, 3)))
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_a_search_by_text_in_params(admin_tab: Console, gateway: Served) -> None:
    """The search form finds tasks by text inside their params (and by an id's start);
    a filter the page does not know is a clear 400, never ignored."""
    _ok(gateway.client("client").post("/v1/tasks", json={
        "task_id": "gift-1", "site": "books", "account": "acct-g", "kind": "gift_card",
        "params": {"recipient": "Ada Lovelace", "amount": 25}}), 201)
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks")
    form = page.locator("form.search")
    form.get_by_label("Text in params or error").fill("lovelace")
    form.get_by_role("button", name="Search").click()
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("gift-1")
    assert "text=lovelace" in page.url
    expect(page.locator("p.searched")).to_contain_text("all there are")
    expect(form.get_by_label("Text in params or error")).to_have_value("lovelace")
    form.get_by_label("Text in params or error").fill('"X1"')  # a value, quotes and all
    form.get_by_label("Site").fill("shop")
    form.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(3)
    for task_id in ("order-a", "order-b", "order-c"):
        expect(page.locator(f'table.jobs tr[data-job-id="{task_id}"]')).to_have_count(1)
    tab.go("/console/tasks?id=order-")  # the start of ids: a list, not a 404
    expect(rows).to_have_count(3)
    response = page.goto(tab.url + "/console/tasks?colour=red")
    assert response is not None and response.status == 400
    expect(page.locator("main")).to_contain_text("colour: not a filter of this page")
    tab.errors.clear()  # the 400 page's own load is reported as a console error


def test_credit_an_account(admin_tab: Console, gateway: Served) -> None:
    tab = admin_tab
    page = tab.page
    tab.go("/console/ledger")
    page.get_by_label("Account (the tenant)").fill(TENANT)
    page.get_by_label("Amount").fill("250")
    page.get_by_label("Reference").fill("wire-2026-12")
    page.get_by_label("Memo").fill("top-up by wire")
    page.get_by_role("button", name="Credit").click()
    expect(page.locator(".notice-ok")).to_contain_text(f"credited {TENANT}")
    account = _ok(gateway.client("admin").get(f"/v1/ledger/accounts/{TENANT}"))
    expect(page.locator("#available")).to_have_text(str(account["available"]))
    expect(page.locator("table", has_text="Txn").locator("tr", has_text="wire-2026-12")
           ).to_contain_text("250")
    expect(page.get_by_role("heading", name=re.compile("^Holds of"))).to_be_visible()


def test_create_and_revoke_keys(admin_tab: Console, gateway: Served, browser: Browser) -> None:
    tab = admin_tab
    page = tab.page
    tab.go("/console/keys")
    page.get_by_label("Role").select_option("client")
    page.get_by_label("Name").fill("doomed")
    page.get_by_label("Tenant").fill(TENANT)
    page.get_by_role("button", name="Create").click()
    secret = page.locator(".notice-secret").inner_text()
    key = re.search(r"lg_\S+", secret)
    assert key is not None, secret
    doomed = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key[0]}"})
    assert doomed.get("/v1/tasks").status_code == 200
    page.reload()
    expect(page.locator(".notice-secret")).to_have_count(0)  # shown once
    # A second operator, signed in with an admin key that is about to be revoked.
    other = _ok(gateway.client("admin").post("/v1/admin/keys", json={
        "role": "admin", "name": "temp operator"}), 201)
    for second in _open(browser, gateway.url, "revoked-session"):
        second.sign_in(other["key"])
        expect(second.page.get_by_role("heading", name=re.compile("^Overview"))).to_be_visible()
        for name in ("doomed", "temp operator"):
            page.get_by_role("button", name=re.compile(f"^Revoke key {name} ")).click()
            # It asks first; nothing is revoked until the operator confirms.
            expect(page.get_by_role("heading", name=re.compile("^Revoke key"))).to_be_visible()
            if name == "doomed":
                assert doomed.get("/v1/tasks").status_code == 200
            page.get_by_role("button", name="Revoke").click()
            expect(page.locator(".notice-ok")).to_contain_text("revoked")
        expect(page.locator("tr", has_text="doomed")).to_contain_text("revoked")
        assert doomed.get("/v1/tasks").status_code == 401
        second.go("/console/ledger")  # the revoked key's session ends on its next request
        expect(second.page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_a_client_key_is_refused(tab: Console, gateway: Served) -> None:
    tab.sign_in(gateway.keys["client"])
    page = tab.page
    expect(page.get_by_role("alert")).to_contain_text("a client key may not use the console")
    assert not [c for c in page.context.cookies() if c["name"] == "leasegate_console"]
    tab.go("/console/keys")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_a_post_without_the_csrf_token_is_refused(gateway: Served) -> None:
    with httpx.Client(base_url=gateway.url) as browser_like:
        signed_in = browser_like.post("/console/sign-in", data={"key": gateway.keys["admin"]})
        assert signed_in.status_code == 303
        before = _ok(gateway.client("admin").get(f"/v1/ledger/accounts/{TENANT}"))
        form = {"account": TENANT, "amount": "5", "ref": "forged"}
        for token in ({}, {"csrf": "guess"}):
            refused = browser_like.post("/console/ledger/credit", data={**form, **token})
            assert refused.status_code == 403
            assert "CSRF token" in refused.text
        # The cookie alone never changes anything through /v1 either.
        forged = browser_like.post(f"/v1/ledger/accounts/{TENANT}/credit",
                                   json={"amount": 5, "ref": "forged"})
        assert forged.status_code == 401
        assert _ok(gateway.client("admin").get(f"/v1/ledger/accounts/{TENANT}")) == before
        # Its reads through /v1 do work (the page's scripts use them).
        assert browser_like.get("/v1/workers").status_code == 200
        assert browser_like.get("/metrics").status_code == 401  # /v1 reads only
        # Only pages with job rows open the event stream; a job's page, for that job.
        assert "data-events" not in browser_like.get("/console/keys").text
        job_page = browser_like.get("/console/tasks/order-a").text
        assert 'data-events="/v1/events?job_id=order-a"' in job_page
        browser_like.post("/console/sign-out", data={})  # no token: refused, still signed in
        assert browser_like.get("/console/keys").status_code == 200


# ---- an operator's actions ------------------------------------------------------------------

def _history(served: Served, task_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _ok(served.client("admin").get(
        f"/v1/tasks/{task_id}/events"))["items"]
    return items


def _fail_on(served: Served, site: str, task_ids: list[str]) -> None:
    """Tasks of ``site`` leased, started and reported failed by w9."""
    client, worker = served.client("client"), served.client("worker")
    for task_id in task_ids:
        _ok(client.post("/v1/tasks", json={"task_id": task_id, "site": site,
                                           "account": task_id, "kind": "sync"}), 201)
    leases = _ok(worker.post("/v1/tasks/lease", json={
        "worker_id": "w9", "wait_seconds": 0, "max": 10, "sites": [site]}))["items"]
    assert {item["task_id"] for item in leases} == set(task_ids)
    for item in leases:
        fence = {"worker_id": "w9", "lease_token": item["lease_token"]}
        _ok(worker.post(f"/v1/tasks/{item['task_id']}/start", json=fence))
        _ok(worker.post(f"/v1/tasks/{item['task_id']}/result",
                        json={**fence, "outcome": "failed", "error": {"message": "503"}}))


def test_resume_cancel_and_retry_one_task(admin_tab: Console, gateway: Served) -> None:
    client = gateway.client("client")
    _ok(client.post("/v1/tasks", json={"task_id": "ops-1", "site": "ops", "kind": "export",
                                       "batch_total": 10}), 201)
    _ok(client.post("/v1/tasks/ops-1/pause"))
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks/ops-1")
    actions = page.locator("section.actions")
    expect(actions.get_by_role("button")).to_have_text(["Resume", "Cancel"])
    actions.get_by_role("button", name="Resume").click()  # a reason is required
    assert page.evaluate("document.activeElement.name") == "reason"
    actions.get_by_label(re.compile("^Resume")).fill("the user is back")
    actions.get_by_role("button", name="Resume").click()
    expect(page.locator(".notice-ok")).to_contain_text("task ops-1: paused → queued")
    actions.get_by_label(re.compile("^Cancel")).fill("the customer withdrew it")
    actions.get_by_role("button", name="Cancel").click()
    expect(page.locator(".notice-ok")).to_contain_text("task ops-1: queued → canceled")
    expect(actions.get_by_role("button")).to_have_text(["Retry"])
    actions.get_by_label(re.compile("^Retry")).fill("the customer wants it after all")
    actions.get_by_role("button", name="Retry").click()
    expect(page.locator(".notice-ok")).to_contain_text("task ops-1: retried, queued")
    timeline = page.locator(".timeline")
    for kind in ("resumed", "canceled", "retried"):
        expect(timeline).to_contain_text(kind)
    events = {e["kind"]: e["detail"] for e in _history(gateway, "ops-1")}
    assert events["retried"]["reason"] == "the customer wants it after all"
    assert events["canceled"]["reason"] == "the customer withdrew it"
    for kind in ("resumed", "canceled", "retried"):
        assert events[kind]["by"].startswith("bootstrap admin ("), events[kind]
    _ok(gateway.client("admin").post("/v1/tasks/ops-1/cancel"))  # leave no queued work


def test_a_bulk_retry_previews_and_asks_before_it_runs(admin_tab: Console,
                                                       gateway: Served) -> None:
    failed = ["bulk-1", "bulk-2", "bulk-3"]
    _fail_on(gateway, "bulk", failed)
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks")
    page.get_by_role("link", name="Retry failed tasks in bulk…").click()
    page.get_by_label("Site").fill("bulk")
    page.get_by_label("Reason").fill("the site's outage is over")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator(".preview")).to_contain_text("3 failed tasks match")
    for task_id in failed:  # a preview changes nothing
        assert _ok(gateway.client("admin").get(f"/v1/tasks/{task_id}"))["status"] == "failed"
    page.get_by_role("button", name="Retry 3 tasks").click()
    expect(page.locator(".notice-ok")).to_contain_text("redrive: 3 of 3 failed tasks requeued")
    for task_id in failed:
        assert _ok(gateway.client("admin").get(f"/v1/tasks/{task_id}"))["status"] == "queued"
        assert _history(gateway, task_id)[-1]["detail"]["reason"] == "the site's outage is over"
        _ok(gateway.client("admin").post(f"/v1/tasks/{task_id}/cancel"))


def test_pausing_a_site_stops_its_leases_until_it_resumes(admin_tab: Console,
                                                          gateway: Served) -> None:
    client, worker = gateway.client("client"), gateway.client("worker")
    _ok(client.post("/v1/tasks", json={"task_id": "pz-1", "site": "pausable", "kind": "k"}),
        201)
    lease = {"worker_id": "w8", "wait_seconds": 0, "sites": ["pausable"]}
    tab = admin_tab
    page = tab.page
    tab.go("/console/sites")
    row = page.locator('tr[data-site="pausable"]')
    expect(row).to_contain_text("leasing")
    row.get_by_label("Why pause pausable").fill("the site is down for maintenance")
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".notice-ok")).to_contain_text("site pausable: paused")
    expect(row).to_contain_text("paused")
    expect(row).to_contain_text("the site is down for maintenance")
    assert _ok(worker.post("/v1/tasks/lease", json=lease))["items"] == []
    health = _ok(gateway.client("admin").get("/health"))
    assert "pausable" in health["details"]["paused_sites"]
    row.get_by_label("Leases a second for pausable").fill("2")
    row.get_by_role("button", name="Set").click()
    expect(page.locator(".notice-ok")).to_contain_text("at most 2 leases a second")
    row.get_by_label("Why resume pausable").fill("maintenance is over")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator(".notice-ok")).to_contain_text("site pausable: resumed")
    expect(row).to_contain_text("≤ 2/s")
    (item,) = _ok(worker.post("/v1/tasks/lease", json=lease))["items"]
    assert item["task_id"] == "pz-1"
    row.get_by_label("Leases a second for pausable").fill("")
    row.get_by_role("button", name="Set").click()
    expect(page.locator(".notice-ok")).to_contain_text("no throttle")
