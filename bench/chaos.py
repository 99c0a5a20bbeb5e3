"""Chaos across gateways: two gateways on one PostgreSQL database, one of them killed
(SIGKILL) every few seconds and restarted, while producers and SDK workers use both.

    .venv/bin/python bench/chaos.py                    # 20 cycles, one every 3 s
    .venv/bin/python bench/chaos.py --cycles 5 --every 2 --server postgresql://...

A fresh database is made on ``--server`` (and dropped after). Producers submit tasks
with their own ids and a ``max_cost``, each to one gateway and, when that one is down,
the same id to the other (a replay, never a second job); a submit is *acknowledged*
once a gateway answered it. Workers (the SDK's ``Worker``, two per gateway) run a
handler that counts each run per task. After the last cycle the producers stop and
every acknowledged task must end ``succeeded``. It prints:

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
LANES = 64
CREDIT = 10**9
ENV = {
    "LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
    "LEASEGATE_TASK_CLAIM_WINDOW": "2",
    "LEASEGATE_LEDGER_RECOVER_INTERVAL": "2",
    "LEASEGATE_DRAIN_SECONDS": "0.2",
}
FAST = Retry(attempts=2, backoff=0.1, max_backoff=1.0)
# A worker talks to one gateway: its retries must outlast that gateway's restart (a few
# seconds, more on a busy machine), or a start whose reply was lost ends the task
# "failed (not executed)", as the SDK's protocol says it must.
PATIENT = Retry(attempts=60, backoff=0.1, max_backoff=1.0)


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: set[str] = field(default_factory=set)
    runs: Counter[str] = field(default_factory=Counter)
    retried_elsewhere: int = 0
    refused: Counter[str] = field(default_factory=Counter)

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


def produce(urls: list[str], key: str, number: int, rate: float, tally: Tally,
            stopping: threading.Event) -> None:
    clients = [Client(url, key, timeout=5, retry=FAST) for url in urls]
    n = 0
    try:
        while not stopping.is_set():
            task_id = f"p{number}-{n}"
            _submit(clients, task_id, n, tally)
            n += 1
            stopping.wait(1 / rate)
    finally:
        for client in clients:
            client.close()


def _submit(clients: list[Client], task_id: str, n: int, tally: Tally) -> None:
    """Until a gateway answers: the first choice, then the other with the same id."""
    for attempt in range(200):
        client = clients[(n + attempt) % len(clients)]
        try:
            client.submit_task(SITE, KIND, {"n": n}, task_id=task_id,
                               account=f"lane-{n % LANES}", max_cost=MAX_COST)
        except TransportError:
            pass
        except LeasegateError as error:
            if error.status != 503:
                with tally.lock:
                    tally.refused[f"{error.status} {error.type}"] += 1
                return
        else:
            with tally.lock:
                tally.acknowledged.add(task_id)
                tally.retried_elsewhere += attempt > 0
            return
        time.sleep(0.1)


def handler_for(tally: Tally) -> Any:
    def handle(job: Job) -> HandlerResult:
        tally.ran(job.id)
        time.sleep(0.01)  # the site's work
        job.cost = COST
        return {"done": job.params["n"]}

    return handle


@contextmanager
def workers(urls: list[str], key: str, per_gateway: int, tally: Tally) -> Iterator[None]:
    running = [Worker(url, key, f"chaos-{g}-{w}", sites=[SITE], wait_seconds=5,
                      retry=PATIENT, timeout=10)
               for g, url in enumerate(urls) for w in range(per_gateway)]
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
    with Client(url, key, timeout=10, retry=FAST) as client, ThreadPoolExecutor(8) as pool:
        return dict(pool.map(lambda task_id: (task_id, client.get_task(task_id)["status"]),
                             sorted(task_ids)))


def unfinished(url: str, key: str) -> int:
    with Client(url, key, timeout=10, retry=FAST) as client:
        return sum(len(client.list_tasks(status=status, limit=500)["items"])
                   for status in ("queued", "leased", "running"))


def ledger(url: str, admin: str) -> tuple[bool, int]:
    with Client(url, admin, timeout=30, retry=FAST) as client:
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
        gateways.urls, keys["client"], p, args.rate, tally, stopping))
        for p in range(args.producers)]
    began = time.monotonic()
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
        settle(gateways, time.monotonic() + args.settle)
    return report(gateways, tally, time.monotonic() - began, describe(args))


def describe(args: argparse.Namespace) -> str:
    return (f"{args.cycles} cycles every {args.every:g} s, {args.producers} producers "
            f"at {args.rate:g}/s, {args.workers} workers per gateway")


def report(gateways: Gateways, tally: Tally, seconds: float, what: str) -> int:
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
    say(f"  run time            {seconds:.0f} s")
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
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=10.0,
                        help="submits per second per producer")
    parser.add_argument("--workers", type=int, default=2, help="SDK workers per gateway")
    parser.add_argument("--settle", type=float, default=90.0,
                        help="seconds allowed after the last cycle for every task to end")
    parser.add_argument("--keep-log", default=None, help="write the gateways' log here")
    args = parser.parse_args()
    say(f"chaos across two gateways on one PostgreSQL database: {describe(args)}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
