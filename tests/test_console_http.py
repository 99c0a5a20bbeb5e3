"""The console over HTTP, without a browser: where sign-in sends you back to."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from leasegate.http.console.pages import degraded_causes
from tests.conftest import Gateway

OVERVIEW = "/console/"


async def sign_in(gateway: Gateway, next_path: str) -> tuple[int, str]:
    """POST the sign-in form with ``next``: the status and where it redirects."""
    response = await gateway.client.post("/console/sign-in", form={
        "key": gateway.keys["admin"], "next": next_path})
    return response.status_code, response.headers.get("Location", "")


@pytest.mark.parametrize("next_path", [
    "/console/tasks?status=stale&site=shop",
    "/console/tasks/order-1",
    "/console",
    "/console/ledger?account=t1&offset=50",
    "/console/tasks/a%20b",
])
async def test_sign_in_returns_to_a_console_path(gateway: Gateway, next_path: str) -> None:
    assert await sign_in(gateway, next_path) == (303, next_path)


@pytest.mark.parametrize("next_path", [
    "/console/\n", "/console/\r\nSet-Cookie: x=1", "/console/\t", "/console/\x00",
    "/console/\x7f", "/console/\u2028", "/console/é", "/console/a b",
    "//evil.example/console", "/console//evil.example", "https://evil.example/console/",
    "javascript:alert(1)", "/console\\evil", "/consolex", "/metrics", "",
    "/console/../metrics", "/console/%2e%2e/metrics", "/console/.%2E/v1/ledger/audit",
    "/console/" + "a" * 3000,
])
async def test_sign_in_refuses_any_other_next(gateway: Gateway, next_path: str) -> None:
    # Never a 500 (a newline in a header), never a raw control character in Location,
    # never somewhere else: anything but a plain console path falls back to /console/.
    assert await sign_in(gateway, next_path) == (303, OVERVIEW)


async def test_the_sign_in_form_keeps_only_a_safe_next(gateway: Gateway) -> None:
    for given, kept in [("/console/%0A", ""), ("/console/%09", ""),
                        ("/console/keys", "/console/keys")]:
        response = await gateway.client.get(f"/console/sign-in?next={given}")
        assert response.status_code == 200
        assert f'name="next" value="{kept}"' in await response.get_data(as_text=True)


@pytest.mark.parametrize("page", ["/console/tasks?site=shop&status=queued",
                                  "/console/tasks/caf%C3%A9", "/console/ledger"])
async def test_a_signed_out_page_comes_back_after_sign_in(gateway: Gateway, page: str) -> None:
    response = await gateway.client.get(page)
    assert response.status_code == 303
    [next_path] = parse_qs(urlsplit(response.headers["Location"]).query)["next"]
    assert await sign_in(gateway, next_path) == (303, page)


async def test_a_live_refresh_leaves_the_notices_to_the_next_page(gateway: Gateway) -> None:
    """The page's script re-reads a page to refresh it; a notice (a form's outcome, a
    new key's secret) waits for the page the operator opens next."""
    await sign_in(gateway, OVERVIEW)
    page = await gateway.client.get("/console/keys")
    html = await page.get_data(as_text=True)
    csrf = html.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    created = await gateway.client.post("/console/keys", form={
        "csrf": csrf, "role": "worker", "name": "desk-9"})
    assert created.status_code == 303
    refreshed = await gateway.client.get("/console/tasks",
                                         headers={"X-Console-Refresh": "1"})
    assert "its secret, shown this once" not in await refreshed.get_data(as_text=True)
    shown = await gateway.client.get(created.headers["Location"])
    assert "its secret, shown this once" in await shown.get_data(as_text=True)


@pytest.mark.parametrize(("form", "refusal"), [
    ({"role": "worker", "name": "desk-9", "sites": ", ,"}, "names no site"),
    ({"role": "client", "name": "desk-9", "tenant": "@world"}, "system account"),
])
async def test_a_refused_key_form_shows_why_and_keeps_the_values(
        gateway: Gateway, form: dict[str, str], refusal: str) -> None:
    """As the API refuses ``sites: []`` and a system account's tenant: nothing is made,
    and the form comes back with the reason and what was typed."""
    await sign_in(gateway, OVERVIEW)
    page = await gateway.client.get("/console/keys")
    html = await page.get_data(as_text=True)
    csrf = html.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    refused = await gateway.client.post("/console/keys", form={"csrf": csrf, **form})
    html = await refused.get_data(as_text=True)
    assert refused.status_code == 400
    assert 'role="alert"' in html and refusal in html
    assert f"<option selected>{form['role']}</option>" in html
    for name in ("name", "tenant", "sites"):
        if name in form:
            assert f'value="{form[name]}"' in html
    _, keys = await gateway.call("GET", "/v1/admin/keys", "admin")
    assert "desk-9" not in {key["name"] for key in keys["items"]}


async def test_the_degraded_badge_names_each_cause(gateway: Gateway) -> None:
    await sign_in(gateway, OVERVIEW)
    status, _ = await gateway.call("POST", "/v1/tasks", "t1", json={
        "site": "nobody-serves", "kind": "k"})
    assert status == 201
    html = await (await gateway.client.get(OVERVIEW)).get_data(as_text=True)
    assert "degraded: 1 site without a worker</span>" in html


def test_each_reason_to_be_degraded_is_named() -> None:
    checks = {"storage_writable": False, "stale_tasks": 2, "sites_without_worker": 1,
              "ledger_ok": False, "overdue_jobs": 1}
    assert degraded_causes(checks) == [
        "storage not writable", "2 stale tasks", "1 site without a worker",
        "ledger audit failing", "1 periodic job overdue"]
    assert degraded_causes({"storage_writable": True, "stale_tasks": 0,
                            "sites_without_worker": 0, "ledger_ok": True,
                            "overdue_jobs": 0}) == []


async def test_a_search_by_a_whole_id_opens_the_job_and_by_its_start_lists(
        gateway: Gateway) -> None:
    await sign_in(gateway, OVERVIEW)
    for channel, job, body in (("tasks", "task_id", {"site": "shop", "kind": "k"}),
                               ("queries", "query_id", {"site": "shop", "kind": "balance"})):
        status, _ = await gateway.call("POST", f"/v1/{channel}", "t1",
                                       json={**body, job: "order-1", "params": {}})
        assert status == 201
        opened = await gateway.client.get(f"/console/{channel}?id=order-1")
        assert (opened.status_code, opened.headers["Location"]) == (
            303, f"/console/{channel}/order-1")
        listed = await gateway.client.get(f"/console/{channel}?id=order-")
        assert listed.status_code == 200
        assert "order-1" in await listed.get_data(as_text=True)
