"""The producers and consumers of ``bench/peers.py``, each run in a process of its own
(see ``_load.run_clients`` for how they are called and what they report).

Every consumer runs the same trivial handler (the job's ``n`` back, as
``bench/lifecycle.py``'s) and acknowledges the job the peer's own way:

* beanstalkd (greenstalk): ``reserve`` then ``delete``, one job at a time. Pipelined
  (beanstalkd has no batch command): a producer writes 100 ``put`` commands in one
  send and then reads their 100 replies; a consumer reserves up to 100 (the first
  waiting up to 1 s, the rest with ``reserve-with-timeout 0``, one round trip each) and
  deletes them with 100 pipelined ``delete`` commands. beanstalkd still runs and
  fsyncs each command alone, in order.
* RQ: ``Queue.enqueue`` a job a call; an RQ ``SimpleWorker`` per consumer process,
  which runs each job in the worker's own process: RQ's default ``Worker`` forks a
  child per job, which would measure fork, not the queue (leasegate's workers do not
  fork either). The job's return value is stored in Redis, as leasegate stores results.
* procrastinate: ``defer`` a job a call (a sync connector, one connection); a worker
  per consumer process with ``concurrency`` 10, as leasegate's lease ``max`` 10.
* leasegate: producers are ``lifecycle.produce``; consumers the SDK's ``AsyncWorker``
  set as in ``lifecycle.py``.

The peer's libraries are imported inside the functions: ``peers.py`` imports this
module whether or not they are installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import Counter
from multiprocessing.synchronize import Event as MPEvent
from typing import TYPE_CHECKING, Any

import trio
from _load import DEADLINE_SECONDS, Child, count_handled
from lifecycle import BATCH, LEASE_MAX, WAIT_SECONDS, Mode, produce

if TYPE_CHECKING:
    import greenstalk
    from _servers import Served

TUBE = "bench"  # beanstalkd's tube, RQ's and procrastinate's queue
TTR = 60  # beanstalkd: seconds a reserved job is the consumer's
PROCRASTINATE_TASK = "bench_echo"
PROCRASTINATE_CONCURRENCY = LEASE_MAX


def handle(n: Any) -> dict[str, Any]:
    """The trivial handler every system runs."""
    return {"n": n}


def _address(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    return host, int(port)


def _name(error: BaseException) -> str:
    return type(error).__name__


# ---- beanstalkd -----------------------------------------------------------------------------


def _pipeline(client: greenstalk.Client[str], commands: list[bytes], expected: bytes) -> None:
    """Send ``commands`` in one write, then read one reply line each (beanstalkd answers
    in order). greenstalk sends one command and waits for its reply; this uses its
    socket and reader, which hold nothing between two of its calls."""
    client._sock.sendall(b"".join(commands))
    for _ in commands:
        reply = client._reader.readline()
        if not reply.startswith(expected):
            raise RuntimeError(f"beanstalkd answered {reply!r}, not {expected!r}")


def produce_beanstalkd(target: str, pipelined: bool, first: int, count: int, go: MPEvent,
                       out: mp.Queue[tuple[str, Any]]) -> None:
    import greenstalk

    latencies: list[float] = []
    failures: Counter[str] = Counter()
    calls = 0
    step = BATCH if pipelined else 1
    with greenstalk.Client(_address(target), use=TUBE) as client:
        go.wait()
        for start in range(first, first + count, step):
            bodies = [json.dumps({"n": n}).encode() for n in
                      range(start, min(start + step, first + count))]
            began = time.perf_counter()
            try:
                if pipelined:
                    _pipeline(client, [b"put 1024 0 %d %d\r\n%b\r\n" % (TTR, len(body), body)
                                       for body in bodies], b"INSERTED")
                else:
                    client.put(bodies[0].decode(), ttr=TTR)
            except (greenstalk.Error, RuntimeError, OSError) as error:
                failures[_name(error)] += len(bodies)
            latencies.append(time.perf_counter() - began)
            calls += 1
    out.put(("producer", (latencies, failures, calls)))


def _reserve(client: greenstalk.Client[str], most: int) -> list[greenstalk.Job[str]]:
    """Up to ``most`` jobs: the first waiting up to a second, the rest only if ready."""
    import greenstalk

    taken: list[greenstalk.Job[str]] = []
    with contextlib.suppress(greenstalk.TimedOutError):
        taken.append(client.reserve(timeout=1))
        while len(taken) < most:
            taken.append(client.reserve(timeout=0))
    return taken


def consume_beanstalkd(target: str, pipelined: bool, index: int, jobs: int, handled: Any,
                       finished: MPEvent, go: MPEvent, out: mp.Queue[tuple[str, Any]]) -> None:
    import greenstalk

    calls: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    last_ack = 0.0
    with greenstalk.Client(_address(target), watch=TUBE) as client:
        go.wait()
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not finished.is_set() and time.monotonic() < deadline:
            taken = _reserve(client, BATCH if pipelined else 1)
            for job in taken:
                handle(json.loads(job.body)["n"])
                count_handled(handled, jobs, finished)
            try:
                if pipelined and taken:
                    _pipeline(client, [b"delete %d\r\n" % job.id for job in taken], b"DELETED")
                for job in taken if not pipelined else ():
                    client.delete(job)
            except (greenstalk.Error, RuntimeError, OSError) as error:
                failures[_name(error)] += len(taken)
                continue
            if taken:
                last_ack = time.perf_counter()
                calls["acked"] += len(taken)
    out.put(("consumer", (calls, failures, last_ack)))


# ---- RQ ---------------------------------------------------------------------------------------

_rq_state: dict[str, Any] = {}  # the consumer process's counters, for rq_echo


def rq_echo(n: int) -> dict[str, Any]:
    """The RQ job (RQ finds it by its dotted name, ``_peer_clients.rq_echo``)."""
    count_handled(_rq_state["handled"], _rq_state["jobs"], _rq_state["finished"])
    return handle(n)


def produce_rq(target: str, first: int, count: int, go: MPEvent,
               out: mp.Queue[tuple[str, Any]]) -> None:
    import redis
    import rq

    latencies: list[float] = []
    failures: Counter[str] = Counter()
    host, port = _address(target)
    with redis.Redis(host=host, port=port) as connection:
        queue = rq.Queue(TUBE, connection=connection)
        go.wait()
        for n in range(first, first + count):
            began = time.perf_counter()
            try:
                queue.enqueue(rq_echo, n)
            except redis.RedisError as error:
                failures[_name(error)] += 1
            latencies.append(time.perf_counter() - began)
    out.put(("producer", (latencies, failures, count)))


def consume_rq(target: str, index: int, jobs: int, handled: Any, finished: MPEvent,
               go: MPEvent, out: mp.Queue[tuple[str, Any]]) -> None:
    import redis
    import rq
    from rq.job import Job
    from rq.worker import SimpleWorker

    class StampedWorker(SimpleWorker):
        """Notes when its last job's outcome was stored (RQ's acknowledgement)."""

        last_ack = 0.0

        def execute_job(self, job: Job, queue: rq.Queue) -> None:
            try:
                super().execute_job(job, queue)
            finally:
                self.last_ack = time.perf_counter()

    _rq_state.update(handled=handled, jobs=jobs, finished=finished)
    host, port = _address(target)
    with redis.Redis(host=host, port=port) as connection:
        worker = StampedWorker([rq.Queue(TUBE, connection=connection)], connection=connection,
                               name=f"bench-c{index}-{os.getpid()}")
        go.wait()
        threading.Thread(target=_stop_rq_worker, args=(finished,), daemon=True).start()
        worker.work(logging_level="WARNING")
    out.put(("consumer", (Counter(), Counter(), worker.last_ack)))


def _stop_rq_worker(finished: MPEvent) -> None:
    """Once every job was handled (or the deadline passed), SIGTERM this process: RQ's
    warm shutdown, which ends the job in hand first, and interrupts a waiting dequeue."""
    finished.wait(DEADLINE_SECONDS)
    deadline = time.monotonic() + 10
    # Not before the worker has put its handler in place (the default would kill us).
    while signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)


# ---- procrastinate -----------------------------------------------------------------------------


def produce_procrastinate(dsn: str, first: int, count: int, go: MPEvent,
                          out: mp.Queue[tuple[str, Any]]) -> None:
    import procrastinate

    latencies: list[float] = []
    failures: Counter[str] = Counter()
    connector = procrastinate.SyncPsycopgConnector(conninfo=dsn, min_size=1, max_size=1)
    with procrastinate.App(connector=connector).open() as app:
        deferrer = app.configure_task(PROCRASTINATE_TASK, queue=TUBE)
        go.wait()
        for n in range(first, first + count):
            began = time.perf_counter()
            try:
                deferrer.defer(n=n)
            except procrastinate.exceptions.ProcrastinateException as error:
                failures[_name(error)] += 1
            latencies.append(time.perf_counter() - began)
    out.put(("producer", (latencies, failures, count)))


def consume_procrastinate(dsn: str, index: int, jobs: int, handled: Any, finished: MPEvent,
                          go: MPEvent, out: mp.Queue[tuple[str, Any]]) -> None:
    failures: Counter[str] = Counter()
    last_ack = asyncio.run(_procrastinate_worker(dsn, index, jobs, handled, finished, go,
                                                 failures))
    out.put(("consumer", (Counter(), failures, last_ack)))


async def _procrastinate_worker(dsn: str, index: int, jobs: int, handled: Any,
                                finished: MPEvent, go: MPEvent, failures: Counter[str]) -> float:
    """A procrastinate worker until every job was handled; the time its last job's end
    was stored (procrastinate's acknowledgement)."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name=PROCRASTINATE_TASK, queue=TUBE)
    async def echo(n: int) -> dict[str, Any]:
        count_handled(handled, jobs, finished)
        return handle(n)

    last_ack = 0.0
    finish = app.job_manager.finish_job

    async def stamped_finish(*args: Any, **kwargs: Any) -> None:
        nonlocal last_ack
        await finish(*args, **kwargs)
        last_ack = time.perf_counter()

    app.job_manager.finish_job = stamped_finish  # type: ignore[method-assign]
    async with app.open_async():
        await asyncio.to_thread(go.wait)
        worker = asyncio.create_task(app.run_worker_async(
            queues=[TUBE], concurrency=PROCRASTINATE_CONCURRENCY, name=f"bench-c{index}",
            install_signal_handlers=False, wait=True))
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not (worker.done() or time.monotonic() > deadline
                   or await asyncio.to_thread(finished.wait, 0.2)):
            pass
        worker.cancel()  # procrastinate's graceful stop: jobs in hand are finished first
        try:
            await worker
        except asyncio.CancelledError:
            pass
        except Exception as error:
            failures[f"worker {_name(error)}"] += 1
    return last_ack


# ---- leasegate ---------------------------------------------------------------------------------


def leasegate(served: Served, mode: Mode) -> tuple[Child, Child]:
    """leasegate's producer (``lifecycle.produce``) and consumer (the SDK's worker,
    below) of ``mode`` against ``served``, for ``run_clients``."""
    return ((produce, (served.url, served.keys["client"], mode)),
            (consume_leasegate, (served.url, served.keys["worker"], mode)))


def consume_leasegate(url: str, key: str, mode: Mode, index: int, jobs: int, handled: Any,
                      finished: MPEvent, go: MPEvent, out: mp.Queue[tuple[str, Any]]) -> None:
    calls: Counter[str] = Counter()
    last_ack = trio.run(_leasegate_worker, url, key, mode, index, jobs, handled, finished,
                        go, calls)
    out.put(("consumer", (calls, Counter(), last_ack)))


async def _leasegate_worker(url: str, key: str, mode: Mode, index: int, jobs: int,
                            handled: Any, finished: MPEvent, go: MPEvent,
                            calls: Counter[str]) -> float:
    """The SDK's AsyncWorker as ``lifecycle.py`` sets it (``batch=10``; batched:
    ``batch=100``) until every job was handled; the time its run returned (every result
    of its jobs answered)."""
    from leasegate.client import AsyncJob, AsyncWorker

    worker = AsyncWorker(url, key, f"bench-c{index}", channel=mode.channel,  # type: ignore[arg-type]
                         wait_seconds=WAIT_SECONDS, timeout=30,
                         batch=BATCH if mode.batched else LEASE_MAX)

    async def handler(job: AsyncJob) -> dict[str, Any]:
        calls["handled"] += 1
        count_handled(handled, jobs, finished)
        return handle(job.params.get("n"))

    async def stop_when_finished() -> None:
        await trio.to_thread.run_sync(finished.wait, DEADLINE_SECONDS, abandon_on_cancel=True)
        worker.stop()

    async with worker, trio.open_nursery() as nursery:
        await trio.to_thread.run_sync(go.wait)
        nursery.start_soon(stop_when_finished)
        await worker.run(handler)
        last_ack = time.perf_counter()
        nursery.cancel_scope.cancel()
    return last_ack
