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

from leasegate.actors.devices import actor as devices_actor
from leasegate.actors.devices import sightings
from leasegate.actors.keys import actor as keys_actor
from leasegate.actors.keys import records as key_messages
from leasegate.actors.ledger import accounts, audit, holds
from leasegate.actors.ledger import actor as ledger_actor
from leasegate.actors.pages import Page
from leasegate.actors.queries import actor as queries_actor
from leasegate.actors.queries import lease as query_lease
from leasegate.actors.queries import operator as query_operator
from leasegate.actors.queries import reads as query_reads
from leasegate.actors.queries import results
from leasegate.actors.queries import submit as query_submit
from leasegate.actors.queue.retry import Redrive
from leasegate.actors.queue.sites import SiteControl
from leasegate.actors.runtime.mailbox import Ask, Message, Ref, Tell
from leasegate.actors.tasks import actor as tasks_actor
from leasegate.actors.tasks import artifacts, control, device_actions, fenced, presence
from leasegate.actors.tasks import lease as task_lease
from leasegate.actors.tasks import operator as task_operator
from leasegate.actors.tasks import reads as task_reads
from leasegate.actors.tasks import submit as task_submit
from leasegate.actors.webhooks import actor as webhooks_actor
from leasegate.actors.webhooks import deliveries as webhook_deliveries
from leasegate.actors.webhooks import endpoints as webhook_endpoints
from leasegate.clock import Clock
from leasegate.errors import InternalError, LeasegateError
from leasegate.settings import Settings
from leasegate.system import System, new_system

NAN = float("nan")
# Values that break some rule wherever they land (a string where a number goes,
# an id with a newline, NaN, a surrogate, an integer past SQLite's 64 bits, ...).
HOSTILE: tuple[object, ...] = (
    "", "x" * 65, "a\n", "a b", "\ud800", 10**20, -(10**20), -1, True, NAN, float("inf"),
    None, (), ("a\n",), ("x" * 65,) * 2, {"n": NAN}, [NAN], {"s": "\ud800"}, object(),
    Page(0, 0), Page(501, 0), Page(1, -1), Page(1, 2**63), (("t", ""),), (("t",),),
)

# One message of each type with every field valid, to be spoiled field by field.
VALID: dict[type[Any], Any] = {
    key_messages.CreateKey: key_messages.CreateKey("worker", "w", None, ("shop",)),
    key_messages.LookupKey: key_messages.LookupKey("abc"),
    key_messages.ListKeys: key_messages.ListKeys(),
    key_messages.RevokeKey: key_messages.RevokeKey("abc"),
    key_messages.CheckRevocations: key_messages.CheckRevocations(),
    key_messages.CountKeys: key_messages.CountKeys(),
    key_messages.CreateFirstKeys: key_messages.CreateFirstKeys((
        key_messages.CreateKey("admin", "a"),)),
    query_submit.SubmitQuery: query_submit.SubmitQuery("ten", "shop", "balance", {}, "q1",
                                                           5),
    query_reads.GetQuery: query_reads.GetQuery("q1", "ten"),
    query_reads.ListQueries: query_reads.ListQueries(tenant="ten", status="queued",
                                                     site="shop", kind="balance"),
    query_lease.LeaseQueries: query_lease.LeaseQueries("w1", ("shop",), 2, "r1"),
    results.QueryResult: results.QueryResult("q1", "w1", "tok", "succeeded", {},
                                                           1, "m", 3, ("shop",)),
    query_lease.ReleaseQueryLeases: query_lease.ReleaseQueryLeases((("q1", "tok"),)),
    query_reads.CountQueries: query_reads.CountQueries(20),
    query_reads.ListQuerySites: query_reads.ListQuerySites(),
    query_submit.SubmitQueries: query_submit.SubmitQueries((
        query_submit.SubmitQuery("ten", "shop", "balance", {}, "q2"),)),
    results.QueryResults: results.QueryResults((
        results.QueryResult("q1", "w1", "tok", "succeeded"),)),
    query_lease.LeaseQueriesAfterResults: query_lease.LeaseQueriesAfterResults(
        (results.QueryResult("q1", "w1", "tok", "succeeded"),),
        query_lease.LeaseQueries("w1", ("shop",), 2, "r2")),
    task_submit.SubmitTask: task_submit.SubmitTask(
        "ten", "shop", "order", {}, "t1", "acct", 3, 1.8e9, "dev", 5, 7),
    task_reads.GetTask: task_reads.GetTask("t1", "ten"),
    task_reads.ListTasks: task_reads.ListTasks(tenant="ten", status="queued", site="shop",
                                                account="acct", kind="order"),
    control.ControlTask: control.ControlTask("t1", "cancel", "ten"),
    task_lease.LeaseTasks: task_lease.LeaseTasks("w1", ("shop",), 2, "r1"),
    fenced.StartTask: fenced.StartTask("t1", "w1", "tok", sites=("shop",)),
    fenced.RenewTask: fenced.RenewTask("t1", "w1", "tok", {}, sites=("shop",)),
    fenced.RenewTasks: fenced.RenewTasks((fenced.RenewTask("t1", "w1", "tok"),)),
    task_lease.LeaseTasksAfterResults: task_lease.LeaseTasksAfterResults(
        (fenced.TaskResult("t1", "w1", "tok", "failed"),),
        task_lease.LeaseTasks("w1", ("shop",), 2, "r2")),
    fenced.TaskResult: fenced.TaskResult("t1", "w1", "tok", "failed", {}, 1, "m",
                                                       3, {}, sites=("shop",)),
    control.ReclaimTask: control.ReclaimTask("t1", "failed", "why", "admin", {}, 2),
    task_lease.ReleaseTaskLeases: task_lease.ReleaseTaskLeases((("t1", "tok"),)),
    presence.ListWorkers: presence.ListWorkers(),
    presence.CheckTaskHealth: presence.CheckTaskHealth(20),
    presence.ListSites: presence.ListSites(Page(), True),
    artifacts.RecordArtifact: artifacts.RecordArtifact(
        "t1", "w1", "tok", "a.txt", artifacts.Upload("staged", 1, "0" * 64), ("shop",)),
    artifacts.ListArtifacts: artifacts.ListArtifacts("t1", "ten"),
    artifacts.CheckUpload: artifacts.CheckUpload("t1", "w1", "tok", ("shop",)),
    control.ReclaimTasks: control.ReclaimTasks((
        control.ReclaimTask("t1", "failed", "why", "admin"),)),
    control.FindStaleTasks: control.FindStaleTasks("shop", "acct", 0.0, 1e9, 10),
    artifacts.FindArtifact: artifacts.FindArtifact("t1", "a.txt", "ten"),
    task_reads.CountTasks: task_reads.CountTasks(),
    task_reads.ExistingTasks: task_reads.ExistingTasks(("t1",)),
    task_submit.SubmitTasks: task_submit.SubmitTasks((
        task_submit.SubmitTask("ten", "shop", "order", {}, "t2"),)),
    fenced.StartTasks: fenced.StartTasks((
        fenced.StartTask("t1", "w1", "tok"),)),
    fenced.TaskResults: fenced.TaskResults((
        fenced.TaskResult("t1", "w1", "tok", "failed"),)),
    accounts.Credit: accounts.Credit("ten", 100, "r1", "memo"),
    accounts.GetAccount: accounts.GetAccount("ten"),
    accounts.ListEntries: accounts.ListEntries("ten"),
    accounts.ListAccounts: accounts.ListAccounts(),
    holds.ListHolds: holds.ListHolds("ten", "open"),
    holds.PlaceHold: holds.PlaceHold("task", "t1", "ten", 5),
    holds.PlaceHolds: holds.PlaceHolds((
        holds.PlaceHold("task", "t3", "ten", 5),)),
    holds.ReleaseHold: holds.ReleaseHold("task", "t1"),
    holds.Settle: holds.Settle("task", "t1", "succeeded", 3),
    holds.HoldsOf: holds.HoldsOf("query", ("q1",)),
    audit.RunAudit: audit.RunAudit(),
    device_actions.ApplyDeviceAction: device_actions.ApplyDeviceAction("ten", "dev", "pause"),
    sightings.SeeDevice: sightings.SeeDevice("ten", "dev"),
    sightings.ActionDone: sightings.ActionDone("ten", "dev", 3),
    sightings.ListDevices: sightings.ListDevices("ten"),
    sightings.CountDevices: sightings.CountDevices(),
    task_operator.RetryTask: task_operator.RetryTask("t1", "why", "ops (k1)"),
    task_operator.RetryTasks: task_operator.RetryTasks((
        task_operator.RetryTask("t2", "why", "ops (k1)"),)),
    task_operator.FindRetryableTasks: task_operator.FindRetryableTasks(
        Redrive("failed", "shop", "k", "ten", 0.0, 1e9, 10)),
    task_operator.SetSite: task_operator.SetSite("shop", "pause", "ops (k1)", "why"),
    task_operator.ListSiteControls: task_operator.ListSiteControls(),
    task_operator.ReloadSiteControls: task_operator.ReloadSiteControls(),
    task_operator.TasksQueuedAt: task_operator.TasksQueuedAt(("shop",)),
    query_operator.RetryQuery: query_operator.RetryQuery("q1", "why", "ops (k1)"),
    query_operator.RetryQueries: query_operator.RetryQueries((
        query_operator.RetryQuery("q2", "why", "ops (k1)"),)),
    query_operator.FindRetryableQueries: query_operator.FindRetryableQueries(
        Redrive("expired", "shop", "k", "ten", 0.0, 1e9, 10)),
    query_operator.ApplySiteControls: query_operator.ApplySiteControls((
        SiteControl("shop", True, 2.0, "why", "ops (k1)", 1.0),)),
    query_operator.QueriesQueuedAt: query_operator.QueriesQueuedAt(("shop",)),
    holds.HoldAgain: holds.HoldAgain("task", "t1", "ten", 5),
    holds.HoldsAgain: holds.HoldsAgain((holds.HoldAgain("query", "q3", "ten", 5),)),
    webhook_endpoints.CreateEndpoint: webhook_endpoints.CreateEndpoint(
        "ten", "https://hooks.test/x", ("task.failed",), "orders"),
    webhook_endpoints.ListEndpoints: webhook_endpoints.ListEndpoints(Page(), "ten"),
    webhook_endpoints.GetEndpoint: webhook_endpoints.GetEndpoint("ep_1", "ten"),
    webhook_endpoints.UpdateEndpoint: webhook_endpoints.UpdateEndpoint(
        "ep_1", "ten", "https://hooks.test/y", ("query.failed",), "d", True),
    webhook_endpoints.DeleteEndpoint: webhook_endpoints.DeleteEndpoint("ep_1", "ten"),
    webhook_endpoints.RotateSecret: webhook_endpoints.RotateSecret("ep_1", "ten"),
    webhook_deliveries.ListDeliveries: webhook_deliveries.ListDeliveries("ep_1", "ten"),
    webhook_deliveries.RetryDelivery: webhook_deliveries.RetryDelivery("ep_1", "ten", "msg_1"),
    webhook_deliveries.ClaimDue: webhook_deliveries.ClaimDue("gw", 10, 40.0),
    webhook_deliveries.RecordAttempts: webhook_deliveries.RecordAttempts("gw", (
        webhook_deliveries.Attempt("msg_1", "ep_1", "{}", False, 500, "HTTP 500", "down"),)),
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
    "items": ((), ("a\n",), (task_reads.GetTask("t1"),)),
    "version": (-1, 10**20, True), "top": (-1, 501, True), "unserved": ("yes", 1, None),
    "selection": (Redrive("nope"), Redrive("failed", site=""), Redrive("failed", site="a\n"),
                  Redrive("failed", kind=""), Redrive("failed", kind="a b"),
                  Redrive("failed", tenant="a\n"), Redrive("failed", since=NAN),
                  Redrive("failed", until=-1.0), Redrive("failed", limit=0)),
    "url": ("", "ftp://x.test/", "https://", "https://u:p@x.test/", "https://[::1", "a\ud800",
            "https://x.test/" + "a" * 2048),
    "events": ((), ("task.started",), ("task.failed", 7)), "description": ("x" * 501,),
    "endpoint_id": ("", "a\n"), "delivery_id": ("", "a\n"), "disabled": ("yes", 1),
    "gateway": ("", "g" * 129), "limit": (0, 1001, True), "lease": (0, NAN, -1.0),
    "attempts": ((1,), (webhook_deliveries.Attempt("a\n", "ep_1", "{}", True, 200, None,
                                                   None),)),
}


MODULES = (*tasks_actor.MODULES, *queries_actor.MODULES, *ledger_actor.MODULES,
           *keys_actor.MODULES, *devices_actor.MODULES, *webhooks_actor.MODULES)


def messages_of(module: ModuleType) -> Iterator[type[Message]]:
    """The messages ``module`` defines (not a base they share, such as ``Fenced``)."""
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, Ask | Tell)
                and value.__module__ == module.__name__ and dataclasses.is_dataclass(value)
                and not value.__subclasses__()):
            yield value


def test_every_message_type_is_covered() -> None:
    every = {cls for module in MODULES for cls in messages_of(module)}
    assert every == set(VALID)


def spoiled(message: Any) -> Iterator[tuple[str, object, Any]]:
    """``message`` with each field spoiled in turn; a field that is a record of fields
    (a redrive's ``selection``) also field by field within it."""
    for field in dataclasses.fields(message):
        for value in HOSTILE:
            yield field.name, value, dataclasses.replace(message, **{field.name: value})
        inner = getattr(message, field.name)
        if dataclasses.is_dataclass(inner) and not isinstance(inner, type | Message):
            for name, value, bad in spoiled(inner):
                yield (f"{field.name}.{name}", value,
                       dataclasses.replace(message, **{field.name: bad}))


@pytest.fixture
async def system(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
                 clock: Clock) -> AsyncIterator[System]:
    system = new_system(tmp_path / "leasegate.db", settings, clock=clock, inline_storage=True)
    await nursery.start(system.run)
    yield system


def owner(system: System, cls: type[Message]) -> Ref[Any]:
    """The ref of the actor whose package defines ``cls``."""
    refs: dict[str, Ref[Any]] = {"tasks": system.tasks, "queries": system.queries,
                                 "ledger": system.ledger, "keys": system.keys,
                                 "devices": system.devices, "webhooks": system.webhooks}
    return refs[cls.__module__.split(".")[2]]


async def send(ref: Ref[Any], message: Message) -> object:
    """The reply or the domain error. A Tell has no reply to carry its error: the
    actor runs the same ``check`` first and drops what it refuses, so that is what
    is asked of it here, after the actor has taken it (and must still be serving)."""
    try:
        with trio.move_on_after(60):  # a valid ``wait=True`` parks; virtual time ends it
            return await _send(ref, message)
        return "parked"
    except LeasegateError as exc:
        return exc


async def _send(ref: Ref[Any], message: Message) -> object:
    if isinstance(message, Tell):
        await ref.tell(message)
        message.check()
        return None
    assert isinstance(message, Ask)
    reply: object = await ref.ask(message)
    return reply


async def still_serving(system: System) -> None:
    assert await system.keys.ask(key_messages.CountKeys()) >= 0
    await system.queries.ask(query_reads.CountQueries())
    await system.tasks.ask(presence.CheckTaskHealth())
    assert (await system.ledger.ask(audit.RunAudit())).ok


async def test_out_of_range_values_are_domain_errors(system: System,
                                                   autojump_clock: MockClock) -> None:
    refused: list[str] = []
    for cls, message in VALID.items():
        for field in dataclasses.fields(message):
            for value in OUT_OF_RANGE.get(field.name, ()):
                bad: Any = dataclasses.replace(message, **{field.name: value})
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
