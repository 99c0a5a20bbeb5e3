"""Money and counts are integers, as JSON Schema means them: a value, so ``100.0``
and ``1e2`` are 100, while what is not a whole number is a 400.

``true`` once credited 1, and ``"100"`` credited 100; ``max_cost`` took ``true``,
``"100"`` and ``false``; ``wait_seconds`` and ``priority`` took ``false``. ``100.0``
was a 400 while the document said "integer" (which 100.0 is). In a query string
(text by nature) an integer is ASCII digits alone. The schema says integer, and
still does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import trio.testing

from tests.conftest import Gateway
from tests.test_http_tasks import ORDER, assert_error, call
from tests.test_ledger import QUERY, account

Json = dict[str, Any]
NOT_INTEGERS: tuple[object, ...] = (True, False, "100", "100.0", 1.5, 1e300, [1], {"n": 1})
NOT_NUMBERS: tuple[object, ...] = (True, False, "1", [1])
FENCE: Json = {"worker_id": "w1", "lease_token": "token"}

# (method, path, role, body with the value in the field under test), for integers.
INTEGER_FIELDS: dict[str, tuple[str, str, str, Callable[[object], Json]]] = {
    "credit amount": ("POST", "/v1/ledger/accounts/t1/credit", "admin",
                      lambda v: {"amount": v, "ref": "r1"}),
    "task max_cost": ("POST", "/v1/tasks", "t1", lambda v: {**ORDER, "max_cost": v}),
    "task priority": ("POST", "/v1/tasks", "t1", lambda v: {**ORDER, "priority": v}),
    "task batch_total": ("POST", "/v1/tasks", "t1", lambda v: {**ORDER, "batch_total": v}),
    "query max_cost": ("POST", "/v1/queries", "t1", lambda v: {**QUERY, "max_cost": v}),
    "task lease max": ("POST", "/v1/tasks/lease", "worker",
                       lambda v: {"worker_id": "w1", "wait_seconds": 0, "max": v}),
    "query lease max": ("POST", "/v1/queries/lease", "worker",
                        lambda v: {"worker_id": "w1", "wait_seconds": 0, "max": v}),
    "task result cost": ("POST", "/v1/tasks/t/result", "worker",
                         lambda v: {**FENCE, "outcome": "succeeded", "cost": v}),
    "task result error code": ("POST", "/v1/tasks/t/result", "worker", lambda v: {
        **FENCE, "outcome": "failed", "error": {"code": v, "message": "no"}}),
    "query result cost": ("POST", "/v1/queries/q/result", "worker",
                          lambda v: {**FENCE, "outcome": "succeeded", "cost": v}),
    "reclaim cost": ("POST", "/v1/tasks/t/reclaim", "admin",
                     lambda v: {"action": "succeeded", "reason": "checked", "cost": v}),
}
# The same, for an item of a batch: that item's 400 alone.
BATCH_ITEM_FIELDS: dict[str, tuple[str, str, Callable[[object], Json]]] = {
    "task batch max_cost": ("/v1/tasks/batch", "t1",
                            lambda v: {"items": [{**ORDER, "max_cost": v}]}),
    "query batch max_cost": ("/v1/queries/batch", "t1",
                             lambda v: {"items": [{**QUERY, "max_cost": v}]}),
    "task results cost": ("/v1/tasks/results", "worker", lambda v: {
        "worker_id": "w1", "items": [{"task_id": "t", "lease_token": "x",
                                      "outcome": "succeeded", "cost": v}]}),
    "query results cost": ("/v1/queries/results", "worker", lambda v: {
        "worker_id": "w1", "items": [{"query_id": "q", "lease_token": "x",
                                      "outcome": "succeeded", "cost": v}]}),
}
LISTS = ("/v1/tasks", "/v1/queries", "/v1/devices", "/v1/workers", "/v1/admin/keys",
         "/v1/ledger/accounts/t1/entries", "/v1/ledger/holds")
NOT_QUERY_INTEGERS = ("5.0", "+5", " 5", "5_0", "1e1", "0x5", "true", "-1", "²", "①", "٥",
                      "𝟓", "５", "")


async def raw(gw: Gateway, method: str, path: str, who: str, text: str) -> tuple[int, Json]:
    """A body sent as written (``1e2`` is a JSON number no Python value serializes to)."""
    status, reply = await gw.call(method, path, who, data=text.encode(),
                                  headers={"Content-Type": "application/json"})
    assert isinstance(reply, dict), reply
    return status, reply


async def nothing_moved(gw: Gateway) -> None:
    assert (await account(gw))["balance"] == 0
    for path in ("/v1/tasks", "/v1/queries"):
        assert (await call(gw, "GET", path, "t1"))[1]["total"] == 0


@pytest.mark.parametrize("name", sorted(INTEGER_FIELDS))
async def test_a_money_field_or_count_that_is_not_an_integer_is_400(
        gateway: Gateway, name: str) -> None:
    method, path, who, body = INTEGER_FIELDS[name]
    for value in NOT_INTEGERS:
        assert_error(*await call(gateway, method, path, who, body(value)), 400, 4000)
    exponent = body(7)  # 1.5e0 as written: 1.5 to a JSON reader
    text = json.dumps(exponent).replace(": 7", ": 1.5e0", 1)
    assert "1.5e0" in text
    assert_error(*await raw(gateway, method, path, who, text), 400, 4000)
    await nothing_moved(gateway)


@pytest.mark.parametrize("name", sorted(INTEGER_FIELDS))
async def test_a_whole_number_written_as_a_float_is_that_integer(
        gateway: Gateway, name: str) -> None:
    """7.0 and 7e0 are the integer 7 (JSON Schema's integer is a value): sent as 7.0,
    then as 7e0, then as 7, each gets the answer of the others, or is a replay of the
    same thing (a submit: 201 then 200, never a conflict)."""
    method, path, who, body = INTEGER_FIELDS[name]
    first = await call(gateway, method, path, who, body(7.0))
    written = json.dumps(body(7)).replace(": 7", ": 7e0", 1)
    assert "7e0" in written
    answers = [first, await raw(gateway, method, path, who, written),
               await call(gateway, method, path, who, body(7))]
    assert first[0] != 400, first
    for status, reply in answers[1:]:
        assert status == first[0] or (first[0], status) == (201, 200), (first, reply)


async def test_a_credit_of_100_0_credits_100(gateway: Gateway) -> None:
    status, reply = await call(gateway, "POST", "/v1/ledger/accounts/t1/credit", "admin",
                               {"amount": 100.0, "ref": "r1"})
    assert status == 200, reply
    status, reply = await raw(gateway, "POST", "/v1/ledger/accounts/t1/credit", "admin",
                              '{"amount": 1e2, "ref": "r2"}')
    assert status == 200, reply
    assert (await account(gateway))["balance"] == 200
    status, entries = await call(gateway, "GET", "/v1/ledger/accounts/t1/entries", "admin")
    assert [entry["amount"] for entry in entries["items"]] == [100, 100]
    assert all(type(entry["amount"]) is int for entry in entries["items"])


@pytest.mark.parametrize("path", ["/v1/tasks/lease", "/v1/queries/lease"])
async def test_wait_seconds_is_a_number_not_a_flag_or_text(gateway: Gateway,
                                                           path: str) -> None:
    for value in NOT_NUMBERS:
        assert_error(*await call(gateway, "POST", path, "worker",
                                 {"worker_id": "w1", "wait_seconds": value}), 400, 4000)
    for value in (0, 0.0):  # an integer is a number too
        status, reply = await call(gateway, "POST", path, "worker",
                                   {"worker_id": "w1", "wait_seconds": value})
        assert (status, reply) == (200, {"items": []})


@pytest.mark.parametrize("name", sorted(BATCH_ITEM_FIELDS))
async def test_a_batch_item_whose_number_is_not_an_integer_is_its_own_400(
        gateway: Gateway, name: str) -> None:
    path, who, body = BATCH_ITEM_FIELDS[name]
    for value in NOT_INTEGERS:
        status, reply = await call(gateway, "POST", path, who, body(value))
        assert status == 200, reply
        [item] = reply["items"]
        assert (item["status"], item["error"]["code"]) == (400, 4000), (value, item)
    await nothing_moved(gateway)


async def test_limit_and_offset_are_ascii_digits(gateway: Gateway) -> None:
    for path in LISTS:
        for name in ("limit", "offset"):
            for value in NOT_QUERY_INTEGERS:
                status, reply = await gateway.call("GET", path, "admin",
                                                   query_string={name: value})
                assert_error(status, reply, 400, 4000)
            status, reply = await gateway.call("GET", path, "admin",
                                               query_string={name: "007"})
            assert status == 200, (path, name, reply)


async def test_last_event_id_is_ascii_digits(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    for value in NOT_QUERY_INTEGERS:
        response = await gateway.client.get("/v1/events", headers=gateway.auth("t1"),
                                            query_string={"last_event_id": value})
        assert response.status_code == 400, value
        if value.strip() != value:
            continue  # a header's surrounding white space is not part of it
        response = await gateway.client.get("/v1/events", headers={
            **gateway.auth("t1"), "Last-Event-ID": value.encode("utf-8").decode("latin-1")})
        assert response.status_code == 400, value


def body_schema(document: Json, method: str, path: str) -> Json:
    found: Json = document["paths"][path][method]["requestBody"]["content"][
        "application/json"]["schema"]
    return found


async def test_the_schema_still_says_integer(gateway: Gateway) -> None:
    document = await (await gateway.client.get("/openapi.json")).get_json()
    amount = body_schema(document, "post", "/v1/ledger/accounts/{account}/credit")[
        "properties"]["amount"]
    assert (amount["type"], amount["exclusiveMinimum"], amount["maximum"]) == (
        "integer", 0, 2**53)
    task = body_schema(document, "post", "/v1/tasks")["properties"]
    query = body_schema(document, "post", "/v1/queries")["properties"]
    result = body_schema(document, "post", "/v1/tasks/{task_id}/result")["properties"]
    lease = body_schema(document, "post", "/v1/tasks/lease")["properties"]
    for field in (task["max_cost"], task["batch_total"], query["max_cost"], result["cost"]):
        [integer, none] = field["anyOf"]
        assert (integer["type"], none["type"]) == ("integer", "null")
    assert task["priority"]["type"] == lease["max"]["type"] == "integer"
    assert lease["wait_seconds"]["type"] == "number"
    for path in LISTS:
        path = path.replace("/t1/", "/{account}/")
        parameters = {p["name"]: p["schema"] for p in document["paths"][path]["get"][
            "parameters"] if p["in"] == "query"}
        for name in ("limit", "offset"):
            assert parameters[name]["type"] == "integer"
            assert "minimum" in parameters[name] and "maximum" in parameters[name]


# ---- the console's forms and pages ---------------------------------------------------

async def console_csrf(gw: Gateway) -> str:
    """Sign in to the console with the admin key (the test client keeps the cookie);
    the session's CSRF token, from a form."""
    signed_in = await gw.client.post("/console/sign-in", form={"key": gw.keys["admin"]})
    assert signed_in.status_code == 303
    keys_page = await (await gw.client.get("/console/keys")).get_data(as_text=True)
    found = re.search(r'name="csrf" value="([^"]+)"', keys_page)
    assert found, keys_page
    return found.group(1)


async def test_the_console_credits_ascii_digits_only(gateway: Gateway) -> None:
    """"²" and "①" were a 500 (``isdigit()`` then ``int()``); "٥", "𝟓" and "５"
    credited 5."""
    csrf = await console_csrf(gateway)
    form = {"csrf": csrf, "account": "t1", "ref": "pay-1"}
    for amount in ("²", "①", "٥", "𝟓", "５", "5.0", "+5", "-5", "1e1", "5_0", "0x5",
                   str(2**53 + 1), "9" * 40):
        refused = await gateway.client.post("/console/ledger/credit",
                                            form={**form, "amount": amount})
        assert refused.status_code == 303, amount  # back to the form, the error on it
        shown = await (await gateway.client.get(refused.headers["Location"])).get_data(
            as_text=True)
        assert "amount must be a whole number" in shown, amount
    assert (await account(gateway))["balance"] == 0
    credited = await gateway.client.post("/console/ledger/credit", form={**form, "amount": "5"})
    assert credited.status_code == 303
    assert (await account(gateway))["balance"] == 5


async def test_the_consoles_offset_is_ascii_digits(gateway: Gateway) -> None:
    await console_csrf(gateway)
    for page in ("/console/tasks", "/console/queries", "/console/ledger", "/console/workers",
                 "/console/keys"):
        for offset in ("²", "①", "٥", "５", "-1", "1.0", str(2**31)):
            response = await gateway.client.get(page, query_string={"offset": offset})
            assert response.status_code == 400, (page, offset)
        assert (await gateway.client.get(page, query_string={"offset": "0"})).status_code == 200
