"""leasegate actor bench: the cost of one job inside the actors, HTTP left out.

``.venv/bin/python bench/actor_items.py`` runs the query and task actors of a
whole system (a fresh database, ``sqlite_synchronous`` FULL as served) in this
process and drives them with batch messages of 100 items, as the batch routes
send them: submit, lease, [start], result. It prints the CPU per item of each
step and per whole job (the trio thread and the storage thread together), so a
change to the actors or their SQL can be measured without the HTTP stack's
noise. ``--profile`` prints where the time went (cProfile, both threads).

The HTTP figures are ``bench/lifecycle.py``'s; what this prints is the part of
them that is ours and scales with the number of items.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TypeVar

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _items import BATCH, each_channel, options

from leasegate.actors.queries.lease import LeaseQueries
from leasegate.actors.queries.results import QueryResult, QueryResults
from leasegate.actors.queries.submit import SubmitQueries, SubmitQuery
from leasegate.actors.runtime.mailbox import Ask, Ref
from leasegate.actors.tasks.fenced import StartTask, StartTasks, TaskResult, TaskResults
from leasegate.actors.tasks.lease import LeaseTasks
from leasegate.actors.tasks.submit import SubmitTask, SubmitTasks
from leasegate.settings import load
from leasegate.system import open_system

A = TypeVar("A")
R = TypeVar("R")


def _process_cpu() -> float:
    return time.process_time()  # every thread of this process


async def step(spent: dict[str, float], name: str, ref: Ref[A], message: Ask[A, R]) -> R:
    """Ask ``ref``'s actor; the process CPU the answer took is added to ``spent[name]``."""
    began = _process_cpu()
    reply = await ref.ask(message)
    spent[name] += _process_cpu() - began
    return reply


async def run(channel: str, rounds: int, spent: dict[str, float], inline: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="leasegate-actor-bench-") as tmp:
        settings = load(environ={}, overrides={"sqlite_synchronous": "FULL"})
        async with open_system(Path(tmp) / "leasegate.db", settings,
                               inline_storage=inline) as system:
            n = 0
            for _ in range(rounds):
                ids = [f"j{n + i}" for i in range(BATCH)]
                n += BATCH
                if channel == "queries":
                    queries = system.queries
                    await step(spent, "submit", queries, SubmitQueries(tuple(
                        SubmitQuery("t1", "bench", "echo", {"n": i}, query_id=qid)
                        for i, qid in enumerate(ids))))
                    got = await step(spent, "lease", queries, LeaseQueries("w1", max=BATCH))
                    await step(spent, "result", queries, QueryResults(tuple(
                        QueryResult(lease.query_id, "w1", lease.lease_token, "succeeded",
                                    {"ok": True}) for lease in got)))
                    leased = len(got)
                else:
                    tasks = system.tasks
                    await step(spent, "submit", tasks, SubmitTasks(tuple(
                        SubmitTask("t1", "bench", "echo", {"n": i}, task_id=tid,
                                   account=f"a{i}")
                        for i, tid in enumerate(ids))))
                    leases = await step(spent, "lease", tasks, LeaseTasks("w1", max=BATCH))
                    await step(spent, "start", tasks, StartTasks(tuple(
                        StartTask(lease.task_id, "w1", lease.lease_token) for lease in leases)))
                    await step(spent, "result", tasks, TaskResults(tuple(
                        TaskResult(lease.task_id, "w1", lease.lease_token, "succeeded",
                                   {"ok": True}) for lease in leases)))
                    leased = len(leases)
                if leased != BATCH:
                    raise RuntimeError(f"leased {leased} of {BATCH}")


def main() -> int:
    args = options(__doc__, rounds=50, profile_help=(
        "print cProfile's top functions (the storage runs on the trio thread then, so "
        "that one profiler sees it all)"))

    def measure(channel: str) -> str:
        spent: dict[str, float] = defaultdict(float)
        trio.run(run, channel, args.rounds, spent, args.profile)
        items = args.rounds * BATCH
        steps = "  ".join(f"{step} {seconds / items * 1e6:5.0f}" for step, seconds in spent.items())
        return (f"{channel:8} us of CPU per item:  {steps}  |  per job "
                f"{sum(spent.values()) / items * 1e6:5.0f} us  ({items} jobs)")

    return each_channel(args, lambda channel: trio.run(
        run, channel, 2, defaultdict(float), args.profile), measure, top=40)


if __name__ == "__main__":
    sys.exit(main())
