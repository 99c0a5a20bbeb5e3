"""Payloads come back exactly as they were sent, numbers literal for literal.

``{"n": 123456789012345678901234567890}`` once came back as ``1.2345678901234568e+29``
(and ``1e2`` as ``100.0``, ``-0`` as ``0``): the body's parser read every number as
a 64-bit integer or a double. Each test sends raw JSON text and reads raw response
text, since a JSON parser on this side would hide the difference. Keys are sent
sorted, as the gateway stores and answers them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

from leasegate.actors.payloads import (
    canonical_json,
    compact_json,
    exact_loads,
    stored_loads,
)
from leasegate.client import AsyncClient, AsyncJob, AsyncWorker, HandlerResult
from leasegate.client._types import JSONObject
from tests.conftest import Gateway
from tests.test_batch_sdk import AppTransport

pytestmark = pytest.mark.both_engines

# Most numbers here are ones that Python's int() or float(), or orjson, would spell
# otherwise; f_one, g_int, l_u64_max and m_exp they keep, and those must stay so too.
EXACT = ('{"a_big":123456789012345678901234567890,"b_past_u64":18446744073709551616,'
         '"c_past_i64":-9223372036854775809,"d_nines":' + "9" * 300 + ','
         '"e_minus_zero":-0,"f_one":1.0,"g_int":1,"h_e2":1e2,"i_E2":1E+2,'
         '"j_long":0.1000000000000000055511151231257827,'
         '"k_pi":3.14159265358979323846264338327950288,"l_u64_max":18446744073709551615,'
         '"m_exp":1e+16,"n_minus_zero":-0.0,"o_nested":[{"x":[1e-7,2.50,-1E-400]}],'
         '"p_tiny":1e-05}')
# What the old parser made of them, in part: none of it may appear.
CHANGED = ("1.2345678901234568e+29", "1.8446744073709552e+19", "-9.223372036854776e+18",
           "1e+300", "100.0", "1e-07", "2.5]", "0.00001")
RAW = {"params", "progress", "result", "items", "results"}  # fields obj() takes as JSON text


def obj(**fields: object) -> str:
    """A JSON object's text: each field a str of JSON text as it is (a payload), or a
    value for json.dumps."""
    return "{" + ",".join(f'"{name}":' + (value if isinstance(value, str) and name in RAW
                                           else json.dumps(value))
                          for name, value in fields.items()) + "}"


def task(task_id: str, **fields: object) -> str:
    return obj(kind="k", params=EXACT, site="s", task_id=task_id, **fields)


def query(query_id: str) -> str:
    return obj(kind="k", params=EXACT, query_id=query_id, site="s")


def items(*bodies: str) -> str:
    return "[" + ",".join(bodies) + "]"


async def send(gw: Gateway, method: str, path: str, who: str,
               body: str | None = None) -> tuple[int, str]:
    """A call with ``body`` as it is; the status and the response's text."""
    headers = {**gw.auth(who), "Content-Type": "application/json"}
    response = await gw.client.open(path, method=method, headers=headers, data=body)
    return response.status_code, await response.get_data(as_text=True)


async def sent(gw: Gateway, method: str, path: str, who: str, body: str | None = None,
               status: int = 200) -> str:
    got, text = await send(gw, method, path, who, body)
    assert got == status, text
    return text


def assert_exact(text: str, field: str, count: int = 1) -> None:
    assert text.count(f'"{field}":{EXACT}') == count, text
    for changed in CHANGED:
        assert changed not in text, (changed, text)


def fenced(text: str) -> dict[str, Any]:
    """The id and token of the one lease in a lease reply (they hold no payload)."""
    (item,) = json.loads(text)["items"]
    return {key: item[key] for key in ("task_id", "query_id", "lease_token") if key in item}


async def test_a_task_keeps_every_payload_as_sent(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    await sent(gateway, "POST", "/v1/tasks", "t1", task("big-1"), 201)
    assert_exact(await sent(gateway, "GET", "/v1/tasks/big-1", "t1"), "params")
    assert_exact(await sent(gateway, "GET", "/v1/tasks?site=s", "t1"), "params")

    leased = await sent(gateway, "POST", "/v1/tasks/lease", "worker",
                        '{"wait_seconds":0,"worker_id":"w1"}')
    assert_exact(leased, "params")
    fence = {"lease_token": fenced(leased)["lease_token"], "worker_id": "w1"}
    await sent(gateway, "POST", "/v1/tasks/big-1/start", "worker", obj(**fence))
    await sent(gateway, "POST", "/v1/tasks/big-1/renew", "worker",
               obj(**fence, progress=EXACT))
    assert_exact(await sent(gateway, "GET", "/v1/tasks/big-1", "t1"), "progress")
    await sent(gateway, "POST", "/v1/tasks/big-1/result", "worker",
               obj(**fence, outcome="succeeded", result=EXACT))

    done = await sent(gateway, "GET", "/v1/tasks/big-1", "t1")
    for field in ("params", "progress", "result"):
        assert_exact(done, field)
    # The history records the checkpoint; the live stream replays it (from the start).
    assert_exact(await sent(gateway, "GET", "/v1/tasks/big-1/events", "t1"), "progress")
    response = await gateway.client.get("/v1/events", headers={
        **gateway.auth("t1"), "Last-Event-ID": "0"})
    assert_exact(await response.get_data(as_text=True), "progress")


async def test_the_console_shows_a_payload_as_sent(gateway: Gateway) -> None:
    await sent(gateway, "POST", "/v1/tasks", "t1", task("big-1"), 201)
    await gateway.client.post("/console/sign-in", form={"key": gateway.keys["admin"]})
    response = await gateway.client.get("/console/tasks/big-1")
    page = await response.get_data(as_text=True)
    assert response.status_code == 200, page
    literals = [value.split(":")[-1] for value in EXACT.strip("{}").split(",")]
    for literal in literals:
        assert literal.strip("[]{}x\"") in page, literal
    for changed in CHANGED:
        assert changed not in page


async def test_a_query_keeps_every_payload_as_sent(gateway: Gateway) -> None:
    await sent(gateway, "POST", "/v1/queries", "t1", query("big-q"), 201)
    assert_exact(await sent(gateway, "GET", "/v1/queries/big-q", "t1"), "params")
    leased = await sent(gateway, "POST", "/v1/queries/lease", "worker",
                        '{"wait_seconds":0,"worker_id":"w1"}')
    assert_exact(leased, "params")
    await sent(gateway, "POST", "/v1/queries/big-q/result", "worker", obj(
        lease_token=fenced(leased)["lease_token"], outcome="succeeded", result=EXACT,
        worker_id="w1"))
    done = await sent(gateway, "GET", "/v1/queries/big-q", "t1")
    assert_exact(done, "params")
    assert_exact(done, "result")


async def test_a_schedule_template_keeps_its_params_as_sent(
        gateway: Gateway, autojump_clock: trio.testing.MockClock) -> None:
    body = ('{"channel":"task","cron":"*/10 * * * *","template":'
            + obj(kind="k", params=EXACT, site="s") + "}")
    assert_exact(await sent(gateway, "PUT", "/v1/schedules/exact", "t1", body, 201), "params")
    assert_exact(await sent(gateway, "GET", "/v1/schedules/exact", "t1"), "params")
    await trio.sleep(600)  # a fire: its task's params are the template's, as sent
    assert_exact(await sent(gateway, "GET", "/v1/tasks?site=s", "t1"), "params")


async def test_batches_keep_every_payload_as_sent(gateway: Gateway) -> None:
    # One lane each (an account each), so that both are leased at once.
    tasks = items(*(task(f"big-{i}", account=f"a{i}") for i in range(2)))
    await sent(gateway, "POST", "/v1/tasks/batch", "t1", obj(items=tasks))
    leased = await sent(gateway, "POST", "/v1/tasks/lease", "worker",
                        obj(max=2, wait_seconds=0, worker_id="w1"))
    assert_exact(leased, "params", 2)
    fences = [{"lease_token": item["lease_token"], "task_id": item["task_id"]}
              for item in json.loads(leased)["items"]]
    for path, extra in (("start", {}), ("renew", {"progress": EXACT}),
                        ("results", {"outcome": "succeeded", "result": EXACT})):
        await sent(gateway, "POST", f"/v1/tasks/{path}", "worker", obj(
            items=items(*(obj(**fence, **extra) for fence in fences)), worker_id="w1"))
    for i in range(2):
        done = await sent(gateway, "GET", f"/v1/tasks/big-{i}", "t1")
        for field in ("params", "progress", "result"):
            assert_exact(done, field)

    queries = items(*(query(f"big-q{i}") for i in range(2)))
    await sent(gateway, "POST", "/v1/queries/batch", "t1", obj(items=queries))
    leased = await sent(gateway, "POST", "/v1/queries/lease", "worker",
                        obj(max=2, wait_seconds=0, worker_id="w1"))
    assert_exact(leased, "params", 2)
    results = items(*(obj(lease_token=item["lease_token"], outcome="succeeded",
                          query_id=item["query_id"], result=EXACT)
                      for item in json.loads(leased)["items"]))
    await sent(gateway, "POST", "/v1/queries/results", "worker",
               obj(items=results, worker_id="w1"))
    for i in range(2):
        assert_exact(await sent(gateway, "GET", f"/v1/queries/big-q{i}", "t1"), "result")


async def test_results_a_lease_call_carries_keep_every_payload_as_sent(
        gateway: Gateway) -> None:
    await sent(gateway, "POST", "/v1/tasks", "t1", task("big-1"), 201)
    await sent(gateway, "POST", "/v1/queries", "t1", query("big-q"), 201)
    task_lease = fenced(await sent(gateway, "POST", "/v1/tasks/lease", "worker",
                                   obj(wait_seconds=0, worker_id="w1")))
    query_lease = fenced(await sent(gateway, "POST", "/v1/queries/lease", "worker",
                                    obj(wait_seconds=0, worker_id="w1")))
    await sent(gateway, "POST", "/v1/tasks/big-1/start", "worker",
               obj(lease_token=task_lease["lease_token"], worker_id="w1"))
    for jobs, carried in (
            ("tasks", obj(**task_lease, outcome="succeeded", progress=EXACT, result=EXACT)),
            ("queries", obj(**query_lease, outcome="succeeded", result=EXACT))):
        await sent(gateway, "POST", f"/v1/{jobs}/lease", "worker",
                   obj(results=items(carried), wait_seconds=0, worker_id="w1"))
    done = await sent(gateway, "GET", "/v1/tasks/big-1", "t1")
    assert_exact(done, "progress")
    assert_exact(done, "result")
    assert_exact(await sent(gateway, "GET", "/v1/queries/big-q", "t1"), "result")


@pytest.mark.parametrize("same", [
    EXACT, EXACT.replace(",", ", ").replace(":", ": "),  # spacing is no part of a value
    '{"p_tiny":1e-05,' + EXACT[1:EXACT.index(',"p_tiny"')] + "}",  # keys in another order
])
async def test_a_replay_is_the_same_literals_and_others_are_a_conflict(
        gateway: Gateway, same: str) -> None:
    await sent(gateway, "POST", "/v1/tasks", "t1", task("big-1"), 201)
    replay = await sent(gateway, "POST", "/v1/tasks", "t1",
                        obj(kind="k", params=same, site="s", task_id="big-1"), 200)
    assert json.loads(replay)["created"] is False
    for literal, other in (("1e2", "100.0"), ("1e2", "100"), ("-0,", "0,"), ("1.0", "1"),
                           ("2.50", "2.5"), ("999,", "998,")):
        changed = EXACT.replace(literal, other, 1)
        status, text = await send(gateway, "POST", "/v1/tasks", "t1",
                                  obj(kind="k", params=changed, site="s", task_id="big-1"))
        assert (status, json.loads(text)["error"]["code"]) == (409, 6004), (literal, text)


@pytest.mark.parametrize("number", ["1e400", "-1E+400", "NaN", "Infinity"])
async def test_what_json_cannot_carry_is_still_a_400_naming_the_field(
        gateway: Gateway, number: str) -> None:
    bad = '{"n":[' + number + "]}"

    async def refused(path: str, who: str, body: str, field: str) -> None:
        status, text = await send(gateway, "POST", path, who, body)
        error = json.loads(text)["error"]
        assert (status, error["code"]) == (400, 4000), text
        assert error["message"].startswith(field), text

    await refused("/v1/tasks", "t1", obj(kind="k", params=bad, site="s"), "params")
    await refused("/v1/queries", "t1", obj(kind="k", params=bad, site="s"), "params")
    assert json.loads(await sent(gateway, "GET", "/v1/tasks", "t1"))["items"] == []
    await sent(gateway, "POST", "/v1/queries", "t1", query("q"), 201)
    leased = await sent(gateway, "POST", "/v1/queries/lease", "worker",
                        obj(wait_seconds=0, worker_id="w1"))
    await refused("/v1/queries/q/result", "worker", obj(
        lease_token=fenced(leased)["lease_token"], outcome="succeeded", result=bad,
        worker_id="w1"), "result")
    assert json.loads(await sent(gateway, "GET", "/v1/queries/q", "t1"))["status"] == "leased"


async def test_other_fields_take_numbers_as_numbers(gateway: Gateway) -> None:
    """Only payloads keep literals: a priority of -0 is 0, a wait of 0e1 seconds is 0."""
    await sent(gateway, "POST", "/v1/tasks", "t1",
               '{"kind":"k","params":{"n":-0},"priority":-0,"site":"s","task_id":"t"}', 201)
    got = await sent(gateway, "GET", "/v1/tasks/t", "t1")
    assert '"params":{"n":-0}' in got and '"priority":0,' in got
    leased = await sent(gateway, "POST", "/v1/tasks/lease", "worker",
                        '{"wait_seconds":0e1,"worker_id":"w1"}')
    assert '"params":{"n":-0}' in leased


# JSON's number grammar (RFC 8259), and text around a number as a body may have it.
LITERAL = r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?"
AROUND = (("[", "]"), ("[ ", " ]"), ('{"n":', "}"), ('{"n": ', ',"m":0}'),
          ('{"s":"1.5","n":\n', '\t,"m":-1}'))


@given(literal=st.from_regex(LITERAL, fullmatch=True), around=st.sampled_from(AROUND))
@example(literal="-9300000000000000000", around=AROUND[0])  # past 64 bits in 19 digits
@example(literal="1e-05", around=AROUND[0])  # orjson would write 0.00001
@example(literal="-0", around=AROUND[4])
@settings(max_examples=1000, deadline=None)
def test_every_literal_is_written_back_as_it_was_read(
        literal: str, around: tuple[str, str]) -> None:
    """The look for numbers that need the exact parse misses none (what it misses
    orjson would change), what the exact parse keeps is written back as it came, and
    so is the stored text when it is read again."""
    if not math.isfinite(float(literal)):
        return  # 1e400: refused by the payload checks, as NaN is
    text = around[0] + literal + around[1]
    value = exact_loads(text)
    number = value[0] if isinstance(value, list) else value["n"]
    assert canonical_json(number) == compact_json(number) == literal, (text, value)
    stored = canonical_json(value)
    assert compact_json(stored_loads(stored)) == stored


async def test_the_sdk_hands_big_integers_over_exactly(
        gateway: Gateway, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock) -> None:
    """Python holds any integer exactly; the SDK read replies by orjson, which made
    the ones past 64 bits floats. (A float such as 1e2 stays what Python makes of it.)"""
    big = {"n": 123456789012345678901234567890, "m": -(2**64), "digits": int("9" * 300)}
    transport = AppTransport(gateway, nursery)
    seen: list[JSONObject] = []

    async def handler(job: AsyncJob) -> HandlerResult:
        seen.append(job.params)
        return {"echo": job.params["n"] + 1}

    async with AsyncClient("http://gateway", gateway.keys["t1"],
                           transport=transport) as upstream:
        await upstream.submit_task("s", "k", big, task_id="big-1")
        assert (await upstream.get_task("big-1"))["params"] == big
        worker = AsyncWorker("http://gateway", gateway.keys["worker"], "w1",
                             transport=transport, wait_seconds=0)
        assert await worker.run_once(handler) == 1
        await worker.aclose()
        assert seen == [big]
        done = await upstream.get_task("big-1")
    assert (done["status"], done["result"]) == ("succeeded", {"echo": big["n"] + 1})
