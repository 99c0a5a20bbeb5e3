"""Chaos across gateways: two gateways on one PostgreSQL database, one of them killed
(SIGKILL) every few seconds and restarted, while producers and SDK workers use both.

    .venv/bin/python bench/chaos.py                    # 20 cycles, one every 3 s
    .venv/bin/python bench/chaos.py --cycles 5 --every 2 --server postgresql://...

A fresh database is made on ``--server`` (and dropped after). Producers (4 at 25 tasks/s
by default, ``--per-call`` 5 a call) submit tasks with their own ids and a
``max_cost``, each to one gateway and,
when that one is down, the same id to the other at once (a replay, never a second
job); a gateway that refused a connection is passed over for ``DOWN_SECONDS``. Each
producer keeps to its rate by the clock (the n-th submit is due n / rate seconds after
its first) with up to ``IN_FLIGHT`` submits under way, so neither a slow answer nor a
failover lowers the rate asked for (only a gateway that cannot take it does). A submit
is *acknowledged* once a gateway answered it. Workers (the SDK's ``Worker`` with
``batch`` 20, four per gateway) are given both gateways, their own first: a worker
whose gateway is killed goes on through the other (its start or result sent again
there with the same lease token). Each runs a handler that counts each run per task. After
the last cycle the producers stop and every acknowledged task must end ``succeeded``.
It prints:

* jobs/s: acknowledged tasks / seconds from the first submit until every one had
  ended (kills, restarts and the settling after the last cycle all count), beside the
  rate the producers were asked for and the rate at which they were acknowledged
  (acknowledged / seconds the producers ran);
* acknowledged: tasks some gateway acknowledged;
* lost: acknowledged tasks that did not succeed (0 expected; their statuses shown);
* executed twice: tasks whose handler ran more than once (0 expected: at most once);
* ledger: the audit on both gateways, and the holds left open (0 once all settled).

Exit status 0 when all of that holds, 1 otherwise. Short settings keep a cycle short:
a claim lapses after ``task_claim_window`` 2 s, so a killed gateway's unstarted claims
are back in the queue soon; ledger recovery runs every 2 s.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import say
from _servers import DEFAULT_SERVER, create_database, drop_database, start_gateway, stop

from leasegate.client import (
    Client,
    HandlerResult,
    Job,
    LeasegateError,
    Retry,
    TransportError,
    Worker,
)

SITE = "chaos"
KIND = "order"
MAX_COST = 5
COST = 3
# Accounts the tasks are spread over: one task in flight per lane, each held from its
# lease to its result (a few round trips), so 64 lanes capped the run near 40 tasks/s.
LANES = 1000
CREDIT = 10**9
ENV = {
    "LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
    "LEASEGATE_TASK_CLAIM_WINDOW": "2",
    "LEASEGATE_LEDGER_RECOVER_INTERVAL": "2",
    "LEASEGATE_DRAIN_SECONDS": "0.2",
}
# A producer's failover is its retry: a gateway that does not answer is left at once.
ONCE = Retry(attempts=1)
DOWN_SECONDS = 0.5  # a gateway that refused a producer is tried again after this
IN_FLIGHT = 16  # submits a producer has under way at most
BATCH = 20  # jobs a worker leases in one call and runs side by side
# A worker's retries (through either gateway) must outlast both being down for a moment,
# or a start whose reply was lost ends the task "failed (not executed)", as the SDK's
# protocol says it must.
PATIENT = Retry(attempts=60, backoff=0.1, max_backoff=1.0)
# The checks after the run: a 503 (a deadlock between the gateways' turns, aborted by
# PostgreSQL) is tried again, not taken for the run's failure.
CHECKS = Retry(attempts=10, backoff=0.2, max_backoff=2.0)


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: set[str] = field(default_factory=set)
    runs: Counter[str] = field(default_factory=Counter)
    retried_elsewhere: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    first_submit: float | None = None  # time.monotonic() of the first submit sent

    def ran(self, task_id: str) -> None:
        with self.lock:
            self.runs[task_id] += 1


class Gateways:
    """A and B, restartable on their ports; ``urls`` stay the same across restarts."""

    def __init__(self, data: Path, database: str, log: Path) -> None:
        self.data, self.database, self.log = data, database, log
        first = start_gateway("gw-a", data, database, ENV, log=log)
        second = start_gateway("gw-b", data, database, ENV, keys=first.keys, log=log)
        self.served = [first, second]
        self.keys = first.keys

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.served]

    def kill_and_restart(self, n: int) -> float:
        """SIGKILL gateway ``n``, start it again on its port; seconds it was down."""
        victim = self.served[n]
        victim.process.kill()
        victim.process.wait(timeout=10)
        down = time.monotonic()
        self.served[n] = start_gateway(victim.name, self.data, self.database, ENV,
                                       port=victim.port, keys=self.keys, log=self.log)
        return time.monotonic() - down

    def stop(self) -> None:
        for served in self.served:
            stop(served)


def produce(urls: list[str], key: str, number: int, args: argparse.Namespace,
            tally: Tally, stopping: threading.Event) -> None:
    clients = [Client(url, key, timeout=5, retry=ONCE) for url in urls]
    down_until = [0.0] * len(clients)
    slots = threading.Semaphore(IN_FLIGHT)

    def submit(items: list[tuple[str, int]]) -> None:
        try:
            _submit(clients, down_until, items, tally)
        finally:
            slots.release()

    n = 0
    began = time.monotonic()
    with tally.lock:
        tally.first_submit = min(tally.first_submit or began, began)
    try:
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            while not stopping.is_set():
                slots.acquire()
                pool.submit(submit, [(f"p{number}-{n + i}", number + n + i)
                                     for i in range(args.per_call)])
                n += args.per_call
                stopping.wait(max(0.0, began + n / args.rate - time.monotonic()))
    finally:
        for client in clients:
            client.close()


def _submit(clients: list[Client], down_until: list[float], items: list[tuple[str, int]],
            tally: Tally) -> None:
    """Until a gateway answers each of ``items`` (task id, n): the n-th gateway in turn
    (the other while it is marked down), then the other with the same ids at once; after
    a round of failures, 0.1 s."""
    start = items[0][1] % len(clients)
    if down_until[start] > time.monotonic():
        start += 1
    for attempt in range(400):
        at = (start + attempt) % len(clients)
        try:
            answers = _send(clients[at], items)
        except TransportError:
            down_until[at] = time.monotonic() + DOWN_SECONDS
        except LeasegateError as error:
            if error.status != 503:
                with tally.lock:
                    tally.refused[f"{error.status} {error.type}"] += len(items)
                return
        else:
            again = []
            with tally.lock:
                for item, answer in zip(items, answers, strict=True):
                    if answer is None:
                        tally.acknowledged.add(item[0])
                        tally.retried_elsewhere += attempt > 0
                    elif answer.status == 503:
                        again.append(item)
                    else:
                        tally.refused[f"{answer.status} {answer.type}"] += 1
            if not again:
                return
            items = again
        if attempt % len(clients) == len(clients) - 1:
            time.sleep(0.1)


def _send(client: Client, items: list[tuple[str, int]]) -> list[LeasegateError | None]:
    """Submit ``items``: one alone, several in one batch call; each one's error, if any."""
    if len(items) == 1:
        ((task_id, n),) = items
        client.submit_task(SITE, KIND, {"n": n}, task_id=task_id, account=f"lane-{n % LANES}",
                           max_cost=MAX_COST)
        return [None]
    bodies = [{"site": SITE, "kind": KIND, "params": {"n": n}, "task_id": task_id,
               "account": f"lane-{n % LANES}", "max_cost": MAX_COST}
              for task_id, n in items]
    return [answer if isinstance(answer, LeasegateError) else None
            for answer in client.submit_many_tasks(bodies)]


def handler_for(tally: Tally) -> Any:
    def handle(job: Job) -> HandlerResult:
        tally.ran(job.id)
        time.sleep(0.01)  # the site's work
        job.cost = COST
        return {"done": job.params["n"]}

    return handle


@contextmanager
def workers(urls: list[str], key: str, per_gateway: int, tally: Tally) -> Iterator[None]:
    running = [Worker(urls[g:] + urls[:g], key, f"chaos-{g}-{w}", sites=[SITE],
                      wait_seconds=5, retry=PATIENT, timeout=10, batch=BATCH)
               for g in range(len(urls)) for w in range(per_gateway)]
    threads = [threading.Thread(target=worker.run, args=(handler_for(tally),), daemon=True)
               for worker in running]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for worker in running:
            worker.stop()
        for thread in threads:
            thread.join(timeout=30)


def statuses(url: str, key: str, task_ids: set[str]) -> dict[str, str]:
    with Client(url, key, timeout=10, retry=CHECKS) as client, ThreadPoolExecutor(8) as pool:
        return dict(pool.map(lambda task_id: (task_id, client.get_task(task_id)["status"]),
                             sorted(task_ids)))


def unfinished(url: str, key: str) -> int:
    with Client(url, key, timeout=10, retry=CHECKS) as client:
        return sum(len(client.list_tasks(status=status, limit=500)["items"])
                   for status in ("queued", "leased", "running"))


def ledger(url: str, admin: str) -> tuple[bool, int]:
    with Client(url, admin, timeout=30, retry=CHECKS) as client:
        audit = client._http.call("GET", "/v1/ledger/audit")
        holds = client._http.call("GET", "/v1/ledger/holds",
                                  params={"status": "open", "limit": 500})
    return bool(audit["ok"]), len(holds["items"])


def settle(gateways: Gateways, deadline: float) -> None:
    """Until no task is queued, leased or running (or the deadline)."""
    url, admin = gateways.urls[0], gateways.keys["admin"]
    while time.monotonic() < deadline and unfinished(url, admin):
        time.sleep(0.5)


def run(args: argparse.Namespace) -> int:
    database = create_database(args.server, "leasegate_chaos")
    tally = Tally()
    try:
        with tempfile.TemporaryDirectory(prefix="leasegate-chaos-") as tmp:
            log = Path(tmp) / "gateways.log"
            gateways = Gateways(Path(tmp) / "var", database, log)
            try:
                return _chaos(gateways, args, tally)
            finally:
                gateways.stop()
                if args.keep_log:
                    Path(args.keep_log).write_text(log.read_text())
    finally:
        drop_database(database)


def _chaos(gateways: Gateways, args: argparse.Namespace, tally: Tally) -> int:
    keys = gateways.keys
    with Client(gateways.urls[0], keys["admin"], timeout=10) as admin:
        admin.credit("default", CREDIT, "chaos")
    stopping = threading.Event()
    producers = [threading.Thread(target=produce, args=(
        gateways.urls, keys["client"], p, args, tally, stopping))
        for p in range(args.producers)]
    with workers(gateways.urls, keys["worker"], args.workers, tally):
        for producer in producers:
            producer.start()
        for cycle in range(args.cycles):
            time.sleep(args.every)
            victim = cycle % 2
            down = gateways.kill_and_restart(victim)
            say(f"cycle {cycle + 1:2d}: killed gw-{'ab'[victim]} (SIGKILL), back in "
                f"{down:.1f} s; acknowledged so far {len(tally.acknowledged)}")
        stopping.set()
        for producer in producers:
            producer.join()
        produced = time.monotonic()
        settle(gateways, produced + args.settle)
        ended = time.monotonic()
    began = tally.first_submit or produced
    rates = Rates(args.producers * args.rate, len(tally.acknowledged) / (produced - began),
                  len(tally.acknowledged) / (ended - began), ended - began)
    return report(gateways, tally, rates, describe(args))


@dataclass(frozen=True)
class Rates:
    asked: float  # producers x rate
    acknowledged: float  # acknowledged / seconds the producers ran
    jobs: float  # acknowledged / seconds from the first submit until all had ended
    seconds: float


def describe(args: argparse.Namespace) -> str:
    return (f"{args.cycles} cycles every {args.every:g} s, {args.producers} producers "
            f"at {args.rate:g}/s ({args.per_call} a call), {args.workers} workers per gateway")


def report(gateways: Gateways, tally: Tally, rates: Rates, what: str) -> int:
    keys = gateways.keys
    found = statuses(gateways.urls[1], keys["admin"], tally.acknowledged)
    ended = Counter(found.values())
    lost = sum(n for status, n in ended.items() if status != "succeeded")
    lost_ids = sorted(task_id for task_id, status in found.items() if status != "succeeded")
    twice = sorted(task_id for task_id, n in tally.runs.items() if n > 1)
    books = [ledger(url, keys["admin"]) for url in gateways.urls]
    audits_ok = all(ok for ok, _ in books)
    open_holds = books[0][1]
    say()
    say(f"chaos: {what}")
    say(f"  jobs/s              {rates.jobs:.0f} (acknowledged / {rates.seconds:.0f} s from "
        f"the first submit until every one had ended); producers asked for "
        f"{rates.asked:.0f}/s, acknowledged {rates.acknowledged:.0f}/s while they ran")
    say(f"  acknowledged        {len(tally.acknowledged)} (sent again to the other gateway "
        f"after a failure: {tally.retried_elsewhere})")
    say(f"  succeeded           {ended.get('succeeded', 0)}")
    say(f"  lost                {lost}" + (f"  {dict(ended)}, e.g. {lost_ids[:5]}"
                                           if lost else ""))
    say(f"  executed twice      {len(twice)}" + (f"  e.g. {twice[:5]}" if twice else ""))
    say(f"  handler runs        {sum(tally.runs.values())}")
    say(f"  ledger audit ok     {'yes' if audits_ok else 'NO'} (both gateways); "
        f"open holds left {open_holds}")
    if tally.refused:
        say(f"  refused submits     {dict(tally.refused)}")
    return 0 if not lost and not twice and audits_ok and open_holds == 0 else 1


def main() -> int:
    # The SDK says each retry on a warning line: expected here, a few hundred of them.
    logging.getLogger("leasegate.client").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=DEFAULT_SERVER,
                        help="the PostgreSQL server (a fresh database is made on it)")
    parser.add_argument("--cycles", type=int, default=20, help="kills (alternating A, B)")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=25.0,
                        help="submits per second per producer")
    parser.add_argument("--workers", type=int, default=4, help="SDK workers per gateway")
    parser.add_argument("--per-call", type=int, default=5,
                        help="tasks a producer submits in one call (1: submit_task; more: "
                             "submit_many_tasks), at the same rate of tasks")
    parser.add_argument("--settle", type=float, default=300.0,
                        help="seconds allowed after the last cycle for every task to end")
    parser.add_argument("--keep-log", default=None, help="write the gateways' log here")
    args = parser.parse_args()
    say(f"chaos across two gateways on one PostgreSQL database: {describe(args)}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
