"""Issue 36 in a real Chromium, against a served gateway of this module's own: stale
work is a compact, filtered list with a bulk reclaim; failures show in the lists, the
overview and a full-width error; the charts' axis is whole; a refused form keeps
its values; dates are UTC with pickers; the live feed links; the theme toggle.

With ``UPDATE_CONSOLE_SCREENSHOT=1`` these tests write the README's screenshots
``docs/console-tasks-stale.png`` and ``docs/console-failed-job.png``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests import test_console_browser as harness
from tests.served import Served
from tests.test_console_browser import ROOT, Console, _luminance, _ok, _open

# The harness' fixtures, this module's own instances (a gateway of its own).
browser, gateway, session_cookie, admin_tab = (
    harness.browser, harness.gateway, harness.session_cookie, harness.admin_tab)

STALE_SHOT = ROOT / "docs" / "console-tasks-stale.png"
FAILED_SHOT = ROOT / "docs" / "console-failed-job.png"
TRACEBACK = "\n".join(
    ["Traceback (most recent call last):"]
    + [f'  File "/srv/worker/shop/checkout_flow_with_a_long_module_name.py", line {n}, '
       f"in step_{n}\n    return await self.session.post(url, json=payload, timeout=30)"
       for n in range(1, 6)]
    + ["shop.errors.UpstreamUnavailable: upstream said 503: retry later"])


def _shot(page: Page, path: Path) -> None:
    if os.environ.get("UPDATE_CONSOLE_SCREENSHOT") == "1":
        page.evaluate("document.activeElement && document.activeElement.blur()")
        path.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(path), full_page=True)


def _signed_in(browser: Any, gateway: Served, cookie: dict[str, Any], name: str,
               **context_args: Any) -> Iterator[Console]:
    """A tab signed in as the bootstrap admin, in a browser context of its own."""
    for tab in _open(browser, gateway.url, name, **context_args):
        tab.page.context.add_cookies([cookie])  # type: ignore[list-item]
        yield tab


def _stale_on(served: Served, site: str, task_ids: list[str]) -> None:
    """Tasks of ``site`` leased and started by w5, left to go stale (a 1 s lease)."""
    client, worker = served.client("client"), served.client("worker")
    for task_id in task_ids:
        _ok(client.post("/v1/tasks", json={"task_id": task_id, "site": site,
                                           "account": task_id, "kind": "place_order",
                                           "params": {"sku": "X2"}}), 201)
    leases = _ok(worker.post("/v1/tasks/lease", json={
        "worker_id": "w5", "wait_seconds": 0, "max": 10, "sites": [site]}))["items"]
    for item in leases:
        _ok(worker.post(f"/v1/tasks/{item['task_id']}/start", json={
            "worker_id": "w5", "lease_token": item["lease_token"]}))
    deadline = time.monotonic() + 10
    while any(_ok(client.get(f"/v1/tasks/{t}"))["status"] != "stale" for t in task_ids):
        assert time.monotonic() < deadline, "the tasks did not go stale"
        time.sleep(0.1)


def _failed(served: Served, site: str, task_id: str, error: dict[str, Any]) -> None:
    client, worker = served.client("client"), served.client("worker")
    _ok(client.post("/v1/tasks", json={"task_id": task_id, "site": site, "kind": "sync",
                                       "params": {"order": 77}}), 201)
    (item,) = _ok(worker.post("/v1/tasks/lease", json={
        "worker_id": "w6", "wait_seconds": 0, "sites": [site]}))["items"]
    fence = {"worker_id": "w6", "lease_token": item["lease_token"]}
    _ok(worker.post(f"/v1/tasks/{task_id}/start", json=fence))
    _ok(worker.post(f"/v1/tasks/{task_id}/result",
                    json={**fence, "outcome": "failed", "error": error}))


def test_stale_tasks_are_compact_filtered_and_reclaimed_in_bulk(admin_tab: Console,
                                                                gateway: Served) -> None:
    stale = ["st-1", "st-2", "st-3"]
    _stale_on(gateway, "triage", stale)
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks")  # 5 stale in all: the module's two and these three
    lines = page.locator("li.stale")
    expect(lines).to_have_count(5)
    for i in range(5):  # a line each, its details closed
        box = lines.nth(i).bounding_box()
        assert box is not None and box["height"] < 48, box
    search = page.get_by_role("heading", name="Search").bounding_box()
    assert search is not None and search["y"] < 700, search  # was 2,100 px with 3
    tab.go("/console/tasks?site=books")  # another site's search: none of them
    expect(page.get_by_role("heading", name=re.compile("^Stale tasks"))).to_contain_text("0")
    expect(page.locator("li.stale")).to_have_count(0)
    tab.go("/console/tasks?site=triage")
    expect(lines).to_have_count(3)
    _shot(page, STALE_SHOT)
    # A bulk reclaim: the search's site, one outcome for all, a reason; refused first.
    page.get_by_text("Reclaim stale tasks in bulk…").click()
    bulk = page.locator("form.bulk-reclaim")
    expect(bulk.get_by_label("Site", exact=True)).to_have_value("triage")
    bulk.get_by_label("failed").check()
    bulk.get_by_label(re.compile("^Reason")).fill("the shop has no such orders")
    bulk.get_by_label(re.compile("^At most")).fill("0")
    bulk.get_by_role("button", name="Preview").click()
    expect(bulk.locator(".form-error")).to_have_text("limit must be a whole number 1-10000")
    expect(bulk.get_by_label(re.compile("^Reason"))).to_have_value("the shop has no such orders")
    expect(bulk.get_by_label("failed")).to_be_checked()
    bulk.get_by_label(re.compile("^At most")).fill("")
    bulk.get_by_role("button", name="Preview").click()
    expect(page.locator(".preview")).to_contain_text("3 stale tasks match")
    for task_id in stale:  # a preview changes nothing
        assert _ok(gateway.client("admin").get(f"/v1/tasks/{task_id}"))["status"] == "stale"
    page.get_by_role("button", name="Reclaim 3 as failed").click()
    expect(page.locator(".notice-ok")).to_contain_text(
        "bulk reclaim: 3 of 3 stale tasks reclaimed as failed")
    for task_id in stale:
        task = _ok(gateway.client("admin").get(f"/v1/tasks/{task_id}"))
        assert (task["status"], task["reclaim"]["reason"]) == (
            "failed", "the shop has no such orders")


def test_failures_show_in_lists_the_overview_and_a_wide_error(admin_tab: Console,
                                                              gateway: Served) -> None:
    _failed(gateway, "flaky", "fl-1", {"code": 503, "message": "upstream said 503\nretry "
                                       "later", "type": "shop.errors.UpstreamUnavailable",
                                       "traceback": TRACEBACK})
    client, worker = gateway.client("client"), gateway.client("worker")
    query = _ok(client.post("/v1/queries", json={  # one attempt: its failure is final
        "site": "flaky", "kind": "price", "max_attempts": 1}), 201)
    (item,) = _ok(worker.post("/v1/queries/lease", json={
        "worker_id": "w6", "wait_seconds": 0, "sites": ["flaky"]}))["items"]
    _ok(worker.post(f"/v1/queries/{item['query_id']}/result", json={
        "worker_id": "w6", "lease_token": item["lease_token"], "outcome": "failed",
        "error": {"code": 429, "message": "rate limited"}}))
    admin = gateway.client("admin")
    _ok(admin.post("/v1/sites/flaky/pause", json={"reason": "upstream outage"}))
    _ok(admin.put("/v1/sites/slowshop/throttle", json={"leases_per_second": 0.5}))
    tab = admin_tab
    page = tab.page
    tab.go("/console/tasks?site=flaky")
    expect(page.locator('tr[data-job-id="fl-1"] td[data-label="Error"]')).to_have_text(
        "503 upstream said 503")  # the code and the message's first line
    tab.go("/console/queries?site=flaky")
    expect(page.locator(f'tr[data-job-id="{query["query_id"]}"] td[data-label="Error"]')
           ).to_have_text("429 rate limited")
    tab.go("/console/")
    row = page.locator('table.site-outcomes tr[data-site="flaky"] td.num')
    expect(row).to_have_text(["2", "0", "2", "0"])  # failed and expired, 1 h and 24 h
    controls = page.locator("section", has=page.get_by_role(
        "heading", name="Paused and throttled sites"))
    expect(controls.locator("li", has_text="flaky")).to_contain_text("paused")
    expect(controls.locator("li", has_text="slowshop")).to_contain_text("≤ 0.5 leases/s")
    # The y axis' top label is whole inside its chart ("00 /min" was cut).
    for label in page.locator("figure.spark svg .label text").all():
        assert label.evaluate("(el) => el.getBBox().x") >= 0, label.text_content()
    tab.go("/console/tasks/fl-1")
    error = page.locator("section.error-card")
    expect(error).to_contain_text("shop.errors.UpstreamUnavailable")
    main = page.locator("main").bounding_box()
    box = error.locator("pre").bounding_box()
    assert main is not None and box is not None and box["width"] > 0.9 * (main["width"] - 40)
    result = page.locator(".timeline li.k-result strong")
    expect(result).to_have_text("result")
    colour = result.evaluate("(el) => getComputedStyle(el).color")
    assert colour == error.locator(".error-type").evaluate(
        "(el) => getComputedStyle(el).color"), colour  # the failure's colour, not green
    page.mouse.move(0, 0)
    _shot(page, FAILED_SHOT)
    _ok(admin.post("/v1/sites/flaky/resume", json={"reason": "test over"}))
    _ok(admin.put("/v1/sites/slowshop/throttle", json={"leases_per_second": None}))


def test_a_refused_throttle_stays_on_its_form_with_the_values(admin_tab: Console,
                                                             gateway: Served) -> None:
    _ok(gateway.client("admin").post("/v1/sites/formsite/pause", json={"reason": "r"}))
    tab = admin_tab
    page = tab.page
    tab.go("/console/sites")
    row = page.locator('tr[data-site="formsite"]')
    for bad in ("abc", "0"):
        row.get_by_label("Leases a second for formsite").fill(bad)
        row.get_by_role("button", name="Set").click()
        expect(row.locator("form.site-throttle .form-error")).to_contain_text(
            "leases_per_second must be a number > 0")
        expect(row.get_by_label("Leases a second for formsite")).to_have_value(bad)
        assert page.url.endswith("/console/sites")
    row.get_by_role("button", name="Resume").click()  # no reason: the browser asks
    row.get_by_label("Why resume formsite").fill("done")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator(".notice-ok")).to_contain_text("site formsite: resumed")
    # Another form, another page: a credit over the most an amount may be.
    tab.go("/console/ledger")
    too_much = "9" * 20
    page.get_by_label("Account (the tenant)").fill("default")
    page.get_by_label("Amount").fill(too_much)
    page.get_by_label("Reference").fill("wire-too-much")
    page.get_by_role("button", name="Credit").click()
    expect(page.locator("form .form-error")).to_contain_text("amount must be a whole number")
    expect(page.get_by_label("Amount")).to_have_value(too_much)
    expect(page.get_by_label("Reference")).to_have_value("wire-too-much")


def test_dates_are_utc_everywhere_and_time_fields_are_pickers(
        browser: Any, gateway: Served, session_cookie: dict[str, Any]) -> None:
    for tab in _signed_in(browser, gateway, session_cookie, "utc-dates",
                          timezone_id="Asia/Tokyo"):
        page = tab.page
        tab.go("/console/tasks?site=books")
        updated = _ok(gateway.client("admin").get("/v1/tasks/later-1"))["updated_at"]
        expect(page.locator('tr[data-job-id="later-1"] td[data-label="Updated"]')
               ).to_have_text(updated.replace("T", " ").replace("Z", "") + " UTC")
        for label in ("Created since (UTC)", "Created until (UTC)"):
            expect(page.get_by_label(label)).to_have_attribute("type", "datetime-local")
        tab.go("/console/redrive?channel=task&status=failed")
        since = page.get_by_label("Ended since (UTC)")
        expect(since).to_have_attribute("type", "datetime-local")
        expect(page.get_by_label("Ended before (UTC)")).to_have_attribute(
            "type", "datetime-local")
        since.fill("2020-01-01T00:00:00")
        page.get_by_label("Site").fill("nowhere")
        page.get_by_label("Reason").fill("a check of the dates")
        page.get_by_role("button", name="Preview").click()
        expect(page.locator(".preview")).to_contain_text("0 failed tasks match")
        expect(page.get_by_label("Ended since (UTC)")).to_have_value("2020-01-01T00:00")


def test_the_live_feed_links_and_the_theme_is_remembered(
        browser: Any, gateway: Served, session_cookie: dict[str, Any]) -> None:
    for tab in _signed_in(browser, gateway, session_cookie, "theme", color_scheme="light"):
        page = tab.page
        tab.go("/console/")
        # The feed shows what happens once its stream is open (a submit before is missed).
        expect(page.locator("body[data-events-open]")).to_have_count(1)
        _ok(gateway.client("client").post("/v1/tasks", json={
            "task_id": "live-1", "site": "books", "account": "acct-live", "kind": "k"}), 201)
        link = page.locator("#live-log").get_by_role("link", name="live-1")
        link.click()
        expect(page.get_by_role("heading", name="Task live-1")).to_be_visible()
        background = "(el) => getComputedStyle(el).backgroundColor"
        assert _luminance(page.locator("body").evaluate(background)) > 0.5
        page.get_by_role("button", name="Dark mode").click()
        assert _luminance(page.locator("body").evaluate(background)) < 0.05
        tab.go("/console/tasks")  # remembered; set before the page is painted
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        assert page.locator("head script[src$='theme.js']:not([defer]):not([async])"
                            ).count() == 1
        assert _luminance(page.locator("body").evaluate(background)) < 0.05
        page.get_by_role("button", name="Light mode").click()
        assert _luminance(page.locator("body").evaluate(background)) > 0.5
        _ok(gateway.client("admin").post("/v1/tasks/live-1/cancel"))
