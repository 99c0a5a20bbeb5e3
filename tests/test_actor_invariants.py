"""Every actor defends its own invariants: a message sent straight to it (not through
the HTTP edge) with a value out of range is a domain error with a code, never a
crash; and the actor goes on serving.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from leasegate.actors import (
    device_messages,
    key_messages,
    ledger_messages,
    query_messages,
    task_messages,
)
from leasegate.actors.mailbox import Ask, Message, Tell
from leasegate.actors.pages import Page
from leasegate.actors.runtime import Actor
from leasegate.actors.system import System, new_system
from leasegate.clock import Clock
from leasegate.errors import InternalError, LeasegateError
from leasegate.settings import Settings

NAN = float("nan")
# Values that break some rule wherever they land (a string where a number goes,
# an id with a newline, NaN, a surrogate, an integer past SQLite's 64 bits, ...).
HOSTILE: tuple[object, ...] = (
    "", "x" * 65, "a\n", "a b", "\ud800", 10**20, -(10**20), -1, True, NAN, float("inf"),
    None, (), ("a\n",), ("x" * 65,) * 2, {"n": NAN}, [NAN], {"s": "\ud800"}, object(),
    Page(0, 0), Page(501, 0), Page(1, -1), Page(1, 2**63), (("t", ""),), (("t",),),
)

# One message of each type with every field valid, to be spoiled field by field.
VALID: dict[type[Message], Message] = {
    key_messages.CreateKey: key_messages.CreateKey("worker", "w", None, ("shop",)),
    key_messages.LookupKey: key_messages.LookupKey("abc"),
    key_messages.ListKeys: key_messages.ListKeys(),
    key_messages.RevokeKey: key_messages.RevokeKey("abc"),
    key_messages.CountKeys: key_messages.CountKeys(),
    query_messages.SubmitQuery: query_messages.SubmitQuery("ten", "shop", "balance", {}, "q1",
                                                           5),
    query_messages.GetQuery: query_messages.GetQuery("q1", "ten"),
    query_messages.ListQueries: query_messages.ListQueries("ten", "queued", "shop", "balance"),
    query_messages.LeaseQueries: query_messages.LeaseQueries("w1", ("shop",), 2, "r1"),
    query_messages.QueryResult: query_messages.QueryResult("q1", "w1", "tok", "succeeded", {},
                                                           1, "m", 3, ("shop",)),
    query_messages.ReleaseQueryLeases: query_messages.ReleaseQueryLeases((("q1", "tok"),)),
    query_messages.CountQueries: query_messages.CountQueries(20),
    query_messages.ListQuerySites: query_messages.ListQuerySites(),
    query_messages.SubmitQueries: query_messages.SubmitQueries((
        query_messages.SubmitQuery("ten", "shop", "balance", {}, "q2"),)),
    query_messages.QueryResults: query_messages.QueryResults((
        query_messages.QueryResult("q1", "w1", "tok", "succeeded"),)),
    task_messages.SubmitTask: task_messages.SubmitTask(
        "ten", "shop", "order", {}, "t1", "acct", 3, 1.8e9, "dev", 5, 7),
    task_messages.GetTask: task_messages.GetTask("t1", "ten"),
    task_messages.ListTasks: task_messages.ListTasks("ten", "queued", "shop", "acct", "order"),
    task_messages.ControlTask: task_messages.ControlTask("t1", "cancel", "ten"),
    task_messages.LeaseTasks: task_messages.LeaseTasks("w1", ("shop",), 2, "r1"),
    task_messages.StartTask: task_messages.StartTask("t1", "w1", "tok", ("shop",)),
    task_messages.RenewTask: task_messages.RenewTask("t1", "w1", "tok", {}, ("shop",)),
    task_messages.TaskResult: task_messages.TaskResult("t1", "w1", "tok", "failed", {}, 1, "m",
                                                       3, {}, ("shop",)),
    task_messages.ReclaimTask: task_messages.ReclaimTask("t1", "failed", "why", "admin", {}, 2),
    task_messages.ReleaseTaskLeases: task_messages.ReleaseTaskLeases((("t1", "tok"),)),
    task_messages.ListWorkers: task_messages.ListWorkers(),
    task_messages.CheckTaskHealth: task_messages.CheckTaskHealth(20),
    task_messages.ListSites: task_messages.ListSites(Page(), True),
    task_messages.RecordArtifact: task_messages.RecordArtifact(
        "t1", "w1", "tok", "a.txt", task_messages.Upload("staged", 1, "0" * 64), ("shop",)),
    task_messages.ListArtifacts: task_messages.ListArtifacts("t1", "ten"),
    task_messages.FindArtifact: task_messages.FindArtifact("t1", "a.txt", "ten"),
    task_messages.CountTasks: task_messages.CountTasks(),
    task_messages.ExistingTasks: task_messages.ExistingTasks(("t1",)),
    task_messages.SubmitTasks: task_messages.SubmitTasks((
        task_messages.SubmitTask("ten", "shop", "order", {}, "t2"),)),
    task_messages.StartTasks: task_messages.StartTasks((
        task_messages.StartTask("t1", "w1", "tok"),)),
    task_messages.TaskResults: task_messages.TaskResults((
        task_messages.TaskResult("t1", "w1", "tok", "failed"),)),
    ledger_messages.Credit: ledger_messages.Credit("ten", 100, "r1", "memo"),
    ledger_messages.GetAccount: ledger_messages.GetAccount("ten"),
    ledger_messages.ListEntries: ledger_messages.ListEntries("ten"),
    ledger_messages.ListAccounts: ledger_messages.ListAccounts(),
    ledger_messages.ListHolds: ledger_messages.ListHolds("ten", "open"),
    ledger_messages.PlaceHold: ledger_messages.PlaceHold("task", "t1", "ten", 5),
    ledger_messages.PlaceHolds: ledger_messages.PlaceHolds((
        ledger_messages.PlaceHold("task", "t3", "ten", 5),)),
    ledger_messages.ReleaseHold: ledger_messages.ReleaseHold("task", "t1"),
    ledger_messages.Settle: ledger_messages.Settle("task", "t1", "succeeded", 3),
    ledger_messages.HoldsOf: ledger_messages.HoldsOf("query", ("q1",)),
    ledger_messages.RunAudit: ledger_messages.RunAudit(),
    task_messages.ApplyDeviceAction: task_messages.ApplyDeviceAction("ten", "dev", "pause"),
    device_messages.SeeDevice: device_messages.SeeDevice("ten", "dev"),
    device_messages.ActionDone: device_messages.ActionDone("ten", "dev", 3),
    device_messages.ListDevices: device_messages.ListDevices("ten"),
    device_messages.CountDevices: device_messages.CountDevices(),
}

# Values each named field must refuse (400), whatever the rest of the message says.
OUT_OF_RANGE: dict[str, tuple[object, ...]] = {
    "task_id": ("", "x" * 65, "a\n", 7), "query_id": ("", "x" * 65, "a\n", 7),
    "worker_id": ("", "a\n", "x" * 65), "site": ("", "a\n"), "kind": ("", "a b"),
    "tenant": ("a\n",), "account": ("", "a\n"), "request_id": ("a\n",),
    "device_id": ("x" * 65,), "key_id": ("",),
    "priority": (-1, 10, 10**20, True), "max": (0, 101, 10**20), "batch_total": (0, 10**20),
    "max_cost": (-1, 10**20), "cost": (-1, 10**20), "error_code": (10**20,),
    "not_before": (NAN, -(10.0**20), 10.0**20), "lease_token": ("", "x" * 129),
    "outcome": ("done", "canceled-ish"), "action": ("retry",), "role": ("root",),
    "status": ("nope",), "wait": ("yes", 1, None), "params": ({"n": NAN}, {"s": "\ud800"}, [1]),
    "result": ({"n": NAN},), "progress": ({"n": NAN},), "reason": ("",), "name": ("",),
    "sites": (("a\n",), ("x",) * 101), "page": (Page(0, 0), Page(501, 0), Page(1, -1)),
    "leases": ((("t", ""),), (("t",),), (("a\n", "tok"),)),
    "amount": (-1, 10**20, True), "ref": ("", "a\n"), "channel": ("tasks",),
    "job_id": ("", "a\n"), "job_ids": (("a\n",), ("x",) * 501), "memo": ("x" * 257,),
    "items": ((), ("a\n",), (task_messages.GetTask("t1"),)),
    "version": (-1, 10**20, True), "top": (-1, 501, True), "unserved": ("yes", 1, None),
}


def messages_of(module: ModuleType) -> Iterator[type[Message]]:
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, Ask | Tell)
                and value.__module__ == module.__name__ and dataclasses.is_dataclass(value)):
            yield value


def test_every_message_type_is_covered() -> None:
    every = {cls for module in (key_messages, query_messages, task_messages, ledger_messages,
                                device_messages)
             for cls in messages_of(module)}
    assert every == set(VALID)


def spoiled(message: Message) -> Iterator[tuple[str, object, Message]]:
    for field in dataclasses.fields(message):  # type: ignore[arg-type]
        for value in HOSTILE:
            yield field.name, value, dataclasses.replace(message, **{field.name: value})  # type: ignore[type-var]


@pytest.fixture
async def system(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
                 clock: Clock) -> AsyncIterator[System]:
    system = new_system(tmp_path / "leasegate.db", settings, clock=clock, inline_storage=True)
    await nursery.start(system.run)
    yield system


def owner(system: System, cls: type[Message]) -> Actor:
    module = cls.__module__
    return {key_messages.__name__: system.keys, query_messages.__name__: system.queries,
            task_messages.__name__: system.tasks, ledger_messages.__name__: system.ledger,
            device_messages.__name__: system.devices}[module]


async def send(actor: Actor, message: Message) -> object:
    """The reply or the domain error. A Tell has no reply to carry its error: the
    actor runs the same ``check`` first and drops what it refuses, so that is what
    is asked of it here, after the actor has taken it (and must still be serving)."""
    try:
        with trio.move_on_after(60):  # a valid ``wait=True`` parks; virtual time ends it
            return await _send(actor, message)
        return "parked"
    except LeasegateError as exc:
        return exc


async def _send(actor: Actor, message: Message) -> object:
    if isinstance(message, Tell):
        await actor.mailbox.tell(message)
        message.check()
        return None
    assert isinstance(message, Ask)
    return await actor.mailbox.ask(message)


async def still_serving(system: System) -> None:
    assert await system.keys.mailbox.ask(key_messages.CountKeys()) >= 0
    await system.queries.mailbox.ask(query_messages.CountQueries())
    await system.tasks.mailbox.ask(task_messages.CheckTaskHealth())
    assert (await system.ledger.mailbox.ask(ledger_messages.RunAudit())).ok


async def test_out_of_range_values_are_domain_errors(system: System,
                                                   autojump_clock: MockClock) -> None:
    refused: list[str] = []
    for cls, message in VALID.items():
        for field in dataclasses.fields(message):  # type: ignore[arg-type]
            for value in OUT_OF_RANGE.get(field.name, ()):
                bad: Any = dataclasses.replace(message, **{field.name: value})  # type: ignore[type-var]
                answer = await send(owner(system, cls), bad)
                if not (isinstance(answer, LeasegateError) and answer.status == 400):
                    refused.append(f"{cls.__name__}.{field.name}={value!r:.30}: {answer!r:.80}")
    assert refused == []
    await still_serving(system)


async def test_hostile_values_never_crash_an_actor(system: System,
                                                   autojump_clock: MockClock) -> None:
    internal: list[str] = []
    for cls, message in VALID.items():
        for name, value, bad in spoiled(message):
            answer = await send(owner(system, cls), bad)
            if isinstance(answer, InternalError) or (
                    isinstance(answer, LeasegateError) and answer.status >= 500):
                internal.append(f"{cls.__name__}.{name}={value!r:.30}: {answer}")
    assert internal == []
    assert all(stats.internal_errors == 0 for stats in system.statistics().actors)
    await still_serving(system)
