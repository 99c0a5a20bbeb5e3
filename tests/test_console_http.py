"""The console over HTTP, without a browser: where sign-in sends you back to."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

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
