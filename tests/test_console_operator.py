"""The console's operator forms over HTTP, without a browser: a query's retry, a bulk
retry that runs only once confirmed, a site's throttle, and the refusals (back to the
form's page with the error and the values sent, nothing changed)."""

from __future__ import annotations

import html as html_module
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Gateway


async def signed_in(gateway: Gateway) -> str:
    """Sign in as the admin; the session's CSRF token."""
    response = await gateway.client.post("/console/sign-in", form={
        "key": gateway.keys["admin"], "next": "/console/"})
    assert response.status_code == 303
    html: str = await (await gateway.client.get("/console/sites")).get_data(as_text=True)
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]


async def post(gateway: Gateway, path: str, form: dict[str, str]) -> tuple[int, str]:
    response = await gateway.client.post(path, form=form)
    html: str = await response.get_data(as_text=True)
    return response.status_code, html


async def refused(gateway: Gateway, path: str, form: dict[str, str],
                  back: str = "/console/") -> dict[str, Any]:
    """A form refused: 303 back to the page it came from (its Referer), whose next
    reading carries the error and the values sent, for the script to show on the form."""
    response = await gateway.client.post(path, form=form, headers={
        "Referer": f"http://localhost{back}"})
    assert response.status_code == 303, await response.get_data(as_text=True)
    assert response.headers["Location"] == back
    html: str = await (await gateway.client.get(back)).get_data(as_text=True)
    kept = json.loads(html_module.unescape(html.split('data-refused="', 1)[1].split('"', 1)[0]))
    assert kept["action"] == path
    assert "csrf" not in kept["values"]
    notice = html_module.escape(kept["message"], quote=False)
    assert f'notice-error" role="status"><span class="notice-text">{notice}' in html
    return dict(kept)


async def failed_query(gateway: Gateway, query_id: str) -> None:
    status, _ = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": query_id, "site": "shop", "kind": "k", "params": {}, "max_attempts": 1})
    assert status == 201
    _, leased = await gateway.call("POST", "/v1/queries/lease", "worker", json={
        "worker_id": "w1", "wait_seconds": 0})
    (item,) = leased["items"]
    await gateway.call("POST", f"/v1/queries/{query_id}/result", "worker", json={
        "worker_id": "w1", "lease_token": item["lease_token"], "outcome": "failed"})


async def job(gateway: Gateway, path: str) -> Any:
    _, found = await gateway.call("GET", path, "admin")
    return found


async def test_a_query_is_retried_from_its_page(gateway: Gateway) -> None:
    csrf = await signed_in(gateway)
    await failed_query(gateway, "cq1")
    html = await (await gateway.client.get("/console/queries/cq1")).get_data(as_text=True)
    assert 'action="/console/queries/cq1/retry"' in html and "/cancel" not in html
    kept = await refused(gateway, "/console/queries/cq1/retry", {"csrf": csrf, "reason": ""},
                         back="/console/queries/cq1")
    assert kept["message"] == "reason is required"
    assert (await job(gateway, "/v1/queries/cq1"))["status"] == "failed"
    status, _ = await post(gateway, "/console/queries/cq1/retry",
                           {"csrf": csrf, "reason": "the shop is up"})
    assert status == 303 and (await job(gateway, "/v1/queries/cq1"))["status"] == "queued"


async def test_a_bulk_retry_runs_only_once_confirmed(gateway: Gateway) -> None:
    csrf = await signed_in(gateway)
    await failed_query(gateway, "bq1")
    form = {"csrf": csrf, "channel": "query", "status": "failed", "site": "shop",
            "reason": "bulk", "limit": "", "kind": "", "tenant": "", "since": "",
            "until": ""}
    status, html = await post(gateway, "/console/redrive", form)
    assert status == 200 and "1</strong> failed queries match" in html
    assert 'name="confirm" value="yes"' in html
    assert (await job(gateway, "/v1/queries/bq1"))["status"] == "failed"
    status, _ = await post(gateway, "/console/redrive", {**form, "confirm": "yes"})
    assert status == 303 and (await job(gateway, "/v1/queries/bq1"))["status"] == "queued"
    for bad in ({"status": "canceled"}, {"limit": "0"}, {"limit": "５"},
                {"since": "yesterday"}, {"since": "2026-12-01 08:00 CET"}, {"site": "a b"},
                {"channel": "devices"}, {"reason": ""}):
        kept = await refused(gateway, "/console/redrive", {**form, **bad},
                             back="/console/redrive?channel=query")
        assert kept["values"] == {k: v for k, v in {**form, **bad}.items() if k != "csrf"}


async def test_a_site_is_throttled_and_refusals_change_nothing(gateway: Gateway) -> None:
    csrf = await signed_in(gateway)
    status, _ = await post(gateway, "/console/sites/shop/throttle",
                           {"csrf": csrf, "leases_per_second": "1.5"})
    assert status == 303
    _, sites = await gateway.call("GET", "/v1/sites", "admin")
    assert sites["items"][0]["leases_per_second"] == 1.5
    for bad in ("0", "-1", "nan", "inf", "fast", "１"):
        kept = await refused(gateway, "/console/sites/shop/throttle",
                             {"csrf": csrf, "leases_per_second": bad}, back="/console/sites")
        assert kept["values"] == {"leases_per_second": bad}
        assert kept["message"].startswith("leases_per_second must be a number > 0")
    await refused(gateway, "/console/sites/shop/pause", {"csrf": csrf, "reason": ""},
                  back="/console/sites")
    status, _ = await post(gateway, "/console/sites/shop/pause", {"reason": "no csrf"})
    assert status == 403
    _, sites = await gateway.call("GET", "/v1/sites", "admin")
    assert (sites["items"][0]["paused"], sites["items"][0]["leases_per_second"]) == (False,
                                                                                     1.5)


async def test_the_job_page_shows_each_attempts_error_and_the_next_attempt(
        gateway: Gateway) -> None:
    await signed_in(gateway)
    status, _ = await gateway.call("POST", "/v1/queries", "t1", json={
        "query_id": "rq1", "site": "shop", "kind": "k", "params": {}, "max_attempts": 4})
    assert status == 201
    _, leased = await gateway.call("POST", "/v1/queries/lease", "worker", json={
        "worker_id": "w1", "wait_seconds": 0})
    (item,) = leased["items"]
    await gateway.call("POST", "/v1/queries/rq1/result", "worker", json={
        "worker_id": "w1", "lease_token": item["lease_token"], "outcome": "failed",
        "error": {"code": 503, "message": "site <down>", "type": "shop.Down",
                  "traceback": "Traceback: line 1"}})
    response = await gateway.client.get("/console/queries/rq1")
    html = await response.get_data(as_text=True)
    assert response.status_code == 200
    assert "<dd>0 of 4</dd>" not in html and "<dd>1 of 4</dd>" in html
    assert "<dt>Next attempt</dt>" in html
    attempts = html.split("Attempts' errors</h2>", 1)[1].split("</section>", 1)[0]
    assert "<strong>#1</strong>" in attempts and "(w1)" in attempts
    assert '<strong class="error-type">shop.Down</strong>' in attempts
    assert "(code 503)" in attempts and "site &lt;down&gt;" in attempts  # escaped
    assert "<pre>Traceback: line 1</pre>" in attempts


@pytest.mark.parametrize("module", sorted(
    f"leasegate.http.console.{path.stem}" for path in
    (Path(__file__).resolve().parent.parent / "leasegate/http/console").glob("*.py")))
def test_each_console_module_imports_first(module: str) -> None:
    """Whichever console module a process imports first, it imports (the gateway could
    not start while the form handlers and the pages imported each other)."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
