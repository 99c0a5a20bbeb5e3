"""leasegate HTTP bench: the CPU per item our HTTP layer spends on the batch routes.

``.venv/bin/python bench/http_items.py`` builds the app with ``create_app`` on a
whole system (a fresh database, inline storage: one thread) in this process and
drives it through Quart's test client with batches of 100 items, as a worker and
an upstream would: submit (``/batch``), lease (``max`` 100), [start], results. For
each route it prints the CPU per item of the whole call (client, server and
actors) and of the server's HTTP part alone: what the app's own trio tasks ran
(Quart, hypercorn-free request handling, our routes, validation, rendering,
encoding), not the actors' tasks (nor the storage, which runs in the actor's
turn with inline storage) and not the bench's client. The per-request costs
(Quart's routing, auth) are in it too, divided by the 100 items.

``--profile`` prints where the time went (cProfile, sorted by own time);
``--only queries|tasks`` runs one channel.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _items import BATCH, each_channel, options

from leasegate.actors.keys.records import CreateKey
from leasegate.http.app import create_app
from leasegate.settings import load
from leasegate.system import new_system


class TaskClock(trio.abc.Instrument):
    """CPU per trio task step, summed by who ran: the actors (and the system's own
    tasks), the bench's client, or the server (the app's tasks: Quart, our routes)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self._began = 0.0
        self.client: trio.lowlevel.Task | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.process_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.client:
            who = "client"
        elif task.name.startswith("leasegate.actors"):
            who = "actors"
        else:
            who = "server"
        self.spent[who] += time.process_time() - self._began


async def run(channel: str, rounds: int, total: dict[str, float], http: dict[str, float],
              tasks: TaskClock) -> None:
    tasks.client = trio.lowlevel.current_task()
    with tempfile.TemporaryDirectory(prefix="leasegate-http-bench-") as tmp:
        settings = load(environ={}, overrides={"sqlite_synchronous": "OFF",
                                               "unsafe_durability": True})
        system = new_system(Path(tmp) / "leasegate.db", settings, inline_storage=True)
        app = create_app(system)
        async with trio.open_nursery() as nursery:
            await nursery.start(system.run)
            client_key = (await system.keys.ask(CreateKey("client", "c", "t1"))).key
            worker_key = (await system.keys.ask(CreateKey("worker", "w", None))).key
            client = app.test_client()

            async def post(step: str, path: str, key: str, body: Any) -> Any:
                began, server = time.process_time(), tasks.spent["server"]
                response = await client.post(path, json=body,
                                             headers={"Authorization": f"Bearer {key}"})
                reply = await response.get_json()
                spent = time.process_time() - began
                total[step] += spent
                http[step] += tasks.spent["server"] - server
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: {response.status_code} {reply}")
                return reply

            n = 0
            for _ in range(rounds):
                ids = range(n, n + BATCH)
                n += BATCH
                if channel == "queries":
                    await post("submit", "/v1/queries/batch", client_key, {"items": [
                        {"query_id": f"q{i}", "site": "bench", "kind": "echo",
                         "params": {"n": i, "tags": ["a", "b"]}} for i in ids]})
                    leases = (await post("lease", "/v1/queries/lease", worker_key, {
                        "worker_id": "w1", "wait_seconds": 0, "max": BATCH}))["items"]
                    await post("result", "/v1/queries/results", worker_key, {
                        "worker_id": "w1", "items": [
                            {"query_id": lease["query_id"], "lease_token": lease["lease_token"],
                             "outcome": "succeeded", "result": {"ok": True, "n": [1, 2]}}
                            for lease in leases]})
                else:
                    await post("submit", "/v1/tasks/batch", client_key, {"items": [
                        {"task_id": f"t{i}", "site": "bench", "account": f"a{i % BATCH}",
                         "kind": "echo", "params": {"n": i, "tags": ["a", "b"]}}
                        for i in ids]})
                    leases = (await post("lease", "/v1/tasks/lease", worker_key, {
                        "worker_id": "w1", "wait_seconds": 0, "max": BATCH}))["items"]
                    fenced = [{"task_id": lease["task_id"], "lease_token": lease["lease_token"]}
                              for lease in leases]
                    await post("start", "/v1/tasks/start", worker_key,
                               {"worker_id": "w1", "items": fenced})
                    await post("result", "/v1/tasks/results", worker_key, {
                        "worker_id": "w1", "items": [
                            {**item, "outcome": "succeeded", "result": {"ok": True, "n": [1, 2]}}
                            for item in fenced]})
                if len(leases) != BATCH:
                    raise RuntimeError(f"leased {len(leases)} of {BATCH}")
            nursery.cancel_scope.cancel()


def main() -> int:
    args = options(__doc__, rounds=30, profile_help="print cProfile's top functions")
    tasks = TaskClock()

    def measure(channel: str) -> str:
        total: dict[str, float] = defaultdict(float)
        http: dict[str, float] = defaultdict(float)
        trio.run(run, channel, args.rounds, total, http, tasks, instruments=[tasks])
        items = args.rounds * BATCH
        lines = [f"{channel:8} {step:7} us of CPU per item: HTTP {http[step] / items * 1e6:6.1f}"
                 f"   whole call {total[step] / items * 1e6:6.1f}" for step in total]
        lines.append(f"{channel:8} per job: HTTP {sum(http.values()) / items * 1e6:6.1f}"
                     f"   whole {sum(total.values()) / items * 1e6:6.1f}  ({items} jobs)")
        return "\n".join(lines)

    return each_channel(args, lambda channel: trio.run(
        run, channel, 2, defaultdict(float), defaultdict(float), tasks, instruments=[tasks]),
        measure, top=45)


if __name__ == "__main__":
    sys.exit(main())
