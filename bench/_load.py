"""The benches' load: a closed loop of HTTP clients (``closed_loop``), and one
lifecycle run of producer and consumer processes, the same for every system
(``run_clients``), with what each cost (``_readings``).

A child of ``run_clients`` is a function called in a fresh (spawned) process:

* a producer as ``fn(*args, first, count, go, out)``: submits jobs ``first ..
  first + count - 1`` after ``go``, then puts ``("producer", (latencies, failures,
  calls))`` on ``out`` (``lifecycle.produce`` is one);
* a consumer as ``fn(*args, index, jobs, handled, finished, go, out)``: after ``go``,
  takes jobs, runs the trivial handler (which adds 1 to ``handled``; the one that
  reaches ``jobs`` sets ``finished``), acknowledges each, and once ``finished`` is set
  and its jobs in hand are acknowledged, puts ``("consumer", (calls, failures,
  last_ack))``, ``last_ack`` the ``time.perf_counter()`` right after its last
  acknowledgement came back (CLOCK_MONOTONIC: one clock for every process here).

The children start together once each has imported its client and connected
(``wait_idle``), then are let go at once. The clock runs from ``go`` to the last
acknowledgement of all; submits/s is the jobs over ``go`` to the moment the last
producer's report arrived. The CPU counters are read when ``finished`` is seen set (the
last job handled, its acknowledgement on the way: cores busy while the jobs ran, not
while idle consumers notice the end) and once every child has reported (CPU per job:
all the work the jobs cost).

Everything here is bounded: every loop has a count or a deadline.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as MPEvent
from typing import Any

import httpx
import trio
from _readings import DatabaseCpu, cpu_seconds, machine_busy_seconds

DEADLINE_SECONDS = 600.0  # a lifecycle run that has not finished by then is reported as such


# ---- closed-loop load -----------------------------------------------------------------


@dataclass
class LoadResult:
    ok: int = 0
    errors: int = 0
    duration: float = 0.0
    latencies: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    server_cpu: float = 0.0  # CPU seconds the server used during the run
    generator_cpu: float = 0.0  # CPU seconds this process used during the run
    machine_cpu: float = 0.0  # CPU seconds every process on the machine used
    slices: list[float] = field(default_factory=list)  # rate of each slice absorbed

    @property
    def per_second(self) -> float:
        return self.ok / self.duration if self.duration else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        """The server's CPU per acknowledged request, in microseconds."""
        return self.server_cpu / max(self.ok, 1) * 1e6

    @property
    def others_cpu(self) -> float:
        """CPU seconds used by processes other than the server and this one."""
        return max(0.0, self.machine_cpu - self.server_cpu - self.generator_cpu)

    def absorb(self, other: LoadResult) -> None:
        """Add a slice of the same load to this total."""
        self.ok += other.ok
        self.errors += other.errors
        self.duration += other.duration
        self.latencies += other.latencies
        self.failures.update(other.failures)
        self.server_cpu += other.server_cpu
        self.generator_cpu += other.generator_cpu
        self.machine_cpu += other.machine_cpu
        self.slices.append(other.per_second)


async def closed_loop(clients: list[httpx.AsyncClient], path: str, body: bytes,
                      expect: int, duration: float, server_pid: int) -> LoadResult:
    """Each client POSTs ``body`` back to back until ``duration`` has passed.

    A request counts as acknowledged when its status is ``expect``. Requests
    already sent when the time is up are waited for (and counted); the
    duration is measured to the last one's end.
    """
    result = LoadResult()
    headers = {"Content-Type": "application/json"}
    cpu0, own0, all0 = cpu_seconds(server_pid), time.process_time(), machine_busy_seconds()
    start = time.perf_counter()
    end = start + duration

    async def one(client: httpx.AsyncClient) -> None:
        now = time.perf_counter()
        while now < end:
            try:
                reply = await client.post(path, content=body, headers=headers)
            except httpx.HTTPError as exc:
                result.errors += 1
                result.failures[type(exc).__name__] += 1
                await trio.sleep(0.01)  # a dead server must not spin this loop
            else:
                if reply.status_code == expect:
                    result.ok += 1
                else:
                    result.errors += 1
                    result.failures[f"HTTP {reply.status_code}"] += 1
            done = time.perf_counter()
            result.latencies.append(done - now)
            now = done

    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(one, client)
    result.duration = time.perf_counter() - start
    result.server_cpu = cpu_seconds(server_pid) - cpu0
    result.generator_cpu = time.process_time() - own0
    result.machine_cpu = machine_busy_seconds() - all0
    return result


@contextlib.asynccontextmanager
async def open_clients(n: int, url: str, headers: dict[str, str],
                       request_timeout: float) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``n`` clients, each with its own keep-alive connection; all closed on exit."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(
            base_url=url, headers=headers, timeout=request_timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1)))
            for _ in range(n)]


def share_out(target: Callable[..., None], total: int, count: int,
              *args: object) -> tuple[list[Connection], list[BaseProcess]]:
    """``count`` processes (not started) that share ``total`` items: each runs
    ``target(*args, first, its_count, pipe)``; the pipes' other ends are returned."""
    context = mp.get_context("spawn")
    pipes: list[Connection] = []
    processes: list[BaseProcess] = []
    share = -(-total // count)
    for c in range(count):
        ours, theirs = context.Pipe()
        pipes.append(ours)
        processes.append(context.Process(
            target=target, args=(*args, c * share, min(share, total - c * share), theirs),
            daemon=True))
    return pipes, processes



# ---- lifecycle runs -------------------------------------------------------------------


def wait_idle(children: list[Any], timeout: float = 60.0) -> None:
    """Until the children have used no CPU for a moment: imported, connected and
    waiting on ``go`` (the clock must not count their start-up)."""
    pids = [child.pid for child in children]
    deadline = time.perf_counter() + timeout
    last = -1.0
    while time.perf_counter() < deadline:
        time.sleep(0.5)
        now = sum(cpu_seconds(pid) for pid in pids)
        if now - last < 0.02:
            return
        last = now


@dataclass
class Measured:
    """What one run of one system in one mode measured."""

    system: str
    mode: str
    jobs: int
    done: int = 0
    seconds: float = 0.0  # go -> last acknowledgement
    submit_seconds: float = 0.0  # go -> last producer done
    server_cpu: float | None = None  # go -> every child reported; None: a shared server
    busy_seconds: float = 0.0  # go -> ``finished`` seen set
    server_busy_cpu: float | None = None  # the server, go -> ``finished`` seen set
    machine_busy_cpu: float = 0.0  # every process on the machine, the same
    submit_s: list[float] = field(default_factory=list)  # one per submit call
    calls: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    skipped: str | None = None
    requests: int = 0  # every HTTP request the server counted (leasegate's runs)
    db_cpu: float | None = None  # its PostgreSQL database's backends, go -> the end

    @property
    def label(self) -> str:
        return f"{self.system}, {self.mode}"

    @property
    def per_second(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    @property
    def submits_per_second(self) -> float:
        return self.jobs / self.submit_seconds if self.submit_seconds > 0 else 0.0

    @property
    def others_busy_cpu(self) -> float:
        """CPU seconds every process but the server used while the jobs ran: the
        clients' (and whatever else ran on the machine)."""
        return max(0.0, self.machine_busy_cpu - (self.server_busy_cpu or 0.0))


Child = tuple[Callable[..., None], tuple[Any, ...]]


def shares(jobs: int, procs: int) -> list[tuple[int, int]]:
    """``(first, count)`` of each producer: ``jobs`` split as evenly as can be."""
    counts = [jobs // procs + (1 if p < jobs % procs else 0) for p in range(procs)]
    return [(sum(counts[:p]), counts[p]) for p in range(procs)]


def run_clients(measured: Measured, producer: Child, consumer: Child, procs: int,
                server_pid: int | None, database: str | None = None) -> Measured:
    """Run the producers and consumers; fill in ``measured``. Every child is gone on
    return (killed if it had not ended within 5 s of the run's end or deadline)."""
    ctx = mp.get_context("spawn")
    go, finished = ctx.Event(), ctx.Event()
    handled = ctx.Value("q", 0)
    out: mp.Queue[tuple[str, Any]] = ctx.Queue()
    produce, produce_args = producer
    consume, consume_args = consumer
    children = [ctx.Process(target=produce, args=(*produce_args, first, count, go, out))
                for first, count in shares(measured.jobs, procs)]
    children += [ctx.Process(target=consume, args=(
        *consume_args, p, measured.jobs, handled, finished, go, out)) for p in range(procs)]
    try:
        for child in children:
            child.start()
        wait_idle(children)
        cpu0 = cpu_seconds(server_pid) if server_pid else 0.0
        db_cpu = DatabaseCpu(database) if database else None
        if db_cpu is not None:
            db_cpu.start()
        all0, began = machine_busy_seconds(), time.perf_counter()

        def busy() -> None:
            measured.busy_seconds = time.perf_counter() - began
            if server_pid:
                measured.server_busy_cpu = cpu_seconds(server_pid) - cpu0
            measured.machine_busy_cpu = machine_busy_seconds() - all0

        go.set()
        last_ack = _collect(out, procs, began, measured, finished, busy)
        if server_pid:
            measured.server_cpu = cpu_seconds(server_pid) - cpu0
        if db_cpu is not None:
            measured.db_cpu = db_cpu.seconds()
        measured.done = int(handled.value)
        measured.seconds = max(0.0, last_ack - began)
        return measured
    finally:
        finished.set()  # consumers still waiting give up
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
                child.join(timeout=5)


def _collect(out: mp.Queue[tuple[str, Any]], procs: int, began: float, measured: Measured,
             finished: MPEvent, busy: Callable[[], None]) -> float:
    """Take the children's reports until all came or the deadline, calling ``busy`` once
    ``finished`` is seen set; returns the last acknowledgement's time."""
    deadline = began + DEADLINE_SECONDS
    producers = consumers = 0
    last_ack = 0.0
    seen = False
    while producers + consumers < 2 * procs and time.perf_counter() < deadline:
        if not seen and finished.is_set():
            seen = True
            busy()
        try:
            role, payload = out.get(timeout=0.01 if not seen else 1.0)
        except queue.Empty:
            continue
        if role == "producer":
            producers += 1
            latencies, failures, calls = payload
            measured.submit_s += latencies
            measured.failures.update(failures)
            measured.calls["submit"] += calls
            if producers == procs:
                measured.submit_seconds = time.perf_counter() - began
        else:
            consumers += 1
            calls, failures, acked_at = payload
            measured.calls.update(calls)
            measured.failures.update(failures)
            last_ack = max(last_ack, acked_at)
    if not seen:
        busy()
    if producers + consumers < 2 * procs:
        finished.set()
        measured.failures[f"{2 * procs - producers - consumers} processes did not "
                          f"report within {DEADLINE_SECONDS:.0f} s"] += 1
    return last_ack


def count_handled(handled: Any, jobs: int, finished: MPEvent) -> None:
    """The trivial handler's bookkeeping: one more job handled; the last sets
    ``finished``."""
    with handled.get_lock():
        handled.value += 1
        if handled.value >= jobs:
            finished.set()
