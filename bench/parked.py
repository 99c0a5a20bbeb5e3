"""leasegate parked-poll bench: what 10,000 waiting long-polls cost the server.

One run (``.venv/bin/python bench/parked.py [--polls N] [--clients C]``, under a
minute) starts ``leasegate serve`` on a fresh data dir (rate limits and the bounds per
caller off) and:

1. times ``POST /v1/queries`` (sequential submits on one keep-alive connection)
   with nothing parked;
2. parks N ``POST /v1/queries/lease`` long-polls (``wait_seconds`` 30, sites
   ``["parked"]``) from C client processes, each holding N/C raw keep-alive
   HTTP/1.1 sockets, and prints the time from the first connect until the
   ``leasegate_actor_waiting_polls`` gauge shows N, the server's VmRSS before and
   after, and the KiB per parked poll;
3. times the same submits again with N parked (for another site, so no waiter
   is served: each submit's turn would have to skip all N if a turn visited
   every parked request);
4. closes the clients' sockets and prints how long until the gauge is 0.

Targets: 10,000 parked under 300 MB RSS and within 5 s.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import (
    HOST,
    actor_gauge,
    cpu_seconds,
    percentile,
    rss_kib,
    share_out,
    start_leasegate,
    stop,
)

# N polls from one worker key and one address: the bounds on what one caller may hold
# (bench/flood.py measures those) are off too.
ENV = {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0", "LEASEGATE_ADDRESS_RATE_LIMIT_PER_SECOND": "0",
       "LEASEGATE_MAX_PARKED_PER_KEY": "0", "LEASEGATE_MAX_PARKED_PER_ADDRESS": "0",
       "LEASEGATE_MAX_CONNECTIONS_PER_ADDRESS": "0"}
SUBMITS = 50  # each waits for an fsync
READS = 200
WARM_UP = 10
CONNECTS_IN_FLIGHT = 128  # per client process: stays within the server's backlog (1024)


def say(line: str) -> None:
    print(line, flush=True)


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))  # children inherit it


# ---- the parking clients (one process each) ---------------------------------------------


def lease_request(port: int, key: str, n: int) -> bytes:
    body = json.dumps({"worker_id": f"park-{n}", "wait_seconds": 30,
                       "sites": ["parked"]}).encode()
    head = (f"POST /v1/queries/lease HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def hold_polls(port: int, key: str, first: int, count: int, pipe: Connection) -> None:
    pipe.send("ready")
    await trio.to_thread.run_sync(pipe.recv)  # go: every client starts at once
    streams: list[trio.SocketStream] = []
    failures = 0
    limit = trio.Semaphore(CONNECTS_IN_FLIGHT)

    async def park(n: int) -> None:
        nonlocal failures
        async with limit:
            try:
                stream = await trio.open_tcp_stream(HOST, port)
                await stream.send_all(lease_request(port, key, n))
            except OSError:
                failures += 1
                return
        streams.append(stream)

    async with trio.open_nursery() as nursery:
        for n in range(first, first + count):
            nursery.start_soon(park, n)
    pipe.send((len(streams), failures))
    await trio.to_thread.run_sync(pipe.recv)  # the bench's word to hang up
    for stream in streams:
        await stream.aclose()
    pipe.send("closed")


def client_process(port: int, key: str, first: int, count: int, pipe: Connection) -> None:
    trio.run(hold_polls, port, key, first, count, pipe)


# ---- the bench ----------------------------------------------------------------------------


async def latencies(url: str, key: str) -> tuple[list[float], list[float]]:
    """Milliseconds of sequential submits, then of reads of the last one (a read's turn
    commits nothing: no fsync, so it shows the turn's own cost best)."""
    submits, reads = [], []
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                                 timeout=30) as client:
        for i in range(SUBMITS + WARM_UP):
            start = time.perf_counter()
            reply = await client.post("/v1/queries", json={"site": "other", "kind": "bench",
                                                           "params": {"i": i}})
            elapsed = time.perf_counter() - start
            reply.raise_for_status()
            if i >= WARM_UP:  # the first few warm the connection and the code paths
                submits.append(elapsed * 1000)
        path = f"/v1/queries/{reply.json()['query_id']}"
        for i in range(READS + WARM_UP):
            start = time.perf_counter()
            reply = await client.get(path)
            elapsed = time.perf_counter() - start
            reply.raise_for_status()
            if i >= WARM_UP:
                reads.append(elapsed * 1000)
    return submits, reads


async def parked(admin: httpx.AsyncClient) -> int:
    return int(await actor_gauge(admin, "leasegate_actor_waiting_polls"))


async def wait_for_gauge(admin: httpx.AsyncClient, done: Callable[[int], bool],
                         within: float) -> tuple[int, float]:
    start = time.perf_counter()
    shown = 0.0
    while True:
        n = await parked(admin)
        took = time.perf_counter() - start
        if done(n) or took > within:
            return n, took
        if took > shown + 2:
            shown = took
            say(f"    ... {n:,} parked after {took:.1f} s")
        await trio.sleep(0.05)


def describe_latency(label: str, took: tuple[list[float], list[float]]) -> str:
    submits, reads = took
    return (f"  {label}: POST /v1/queries p50 {percentile(submits, 50):.2f} ms "
            f"(p99 {percentile(submits, 99):.2f}, {len(submits)} sequential); "
            f"GET /v1/queries/{{id}} p50 {percentile(reads, 50):.2f} ms "
            f"(p99 {percentile(reads, 99):.2f}, {len(reads)} sequential)")


async def run(url: str, keys: dict[str, str], pid: int, polls: int, clients: int,
              port: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"Authorization": f"Bearer {keys['admin']}"}) as admin:
        idle = await latencies(url, keys["client"])
        say(describe_latency("nothing parked", idle))
        rss_before = rss_kib(pid)
        say(f"  server VmRSS before parking: {rss_before / 1024:.1f} MiB")

        pipes, processes = share_out(client_process, polls, clients, port, keys["worker"])
        # The clock starts once the client processes are up, not at interpreter start-up.
        for process in processes:
            process.start()
        for pipe in pipes:
            await trio.to_thread.run_sync(pipe.recv)
        for pipe in pipes:
            pipe.send("go")
        cpu_before = cpu_seconds(pid)
        n, took = await wait_for_gauge(admin, lambda n: n >= polls, within=60)
        cpu = cpu_seconds(pid) - cpu_before
        failures = 0
        for pipe in pipes:
            _, failed = await trio.to_thread.run_sync(pipe.recv)
            failures += failed
        rss_after = rss_kib(pid)
        say(f"  {n:,} parked {took:.2f} s after the first connect, {failures} connects failed; "
            f"server CPU meanwhile {cpu:.2f} s ({cpu / max(n, 1) * 1e6:.0f} us per poll)")
        say(f"  server VmRSS with {n:,} parked: {rss_after / 1024:.1f} MiB "
            f"({(rss_after - rss_before) / max(n, 1):.1f} KiB per parked poll)")

        busy = await latencies(url, keys["client"])
        say(describe_latency(f"{await parked(admin):,} parked", busy))

        for pipe in pipes:
            pipe.send("hang up")
        for pipe in pipes:
            await trio.to_thread.run_sync(pipe.recv)
        left, took = await wait_for_gauge(admin, lambda n: n == 0, within=20)
        say(f"  clients hung up: {left} still parked after {took:.2f} s")
        for process in processes:
            process.join(5)
        say(f"  server VmRSS after they left: {rss_kib(pid) / 1024:.1f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    raise_fd_limit(args.polls + 1024)
    say(f"leasegate parked-poll bench: {args.polls:,} long-polls from {args.clients} "
        "client processes (raw keep-alive HTTP/1.1 sockets); rate limits off")
    with tempfile.TemporaryDirectory(prefix="leasegate-parked-") as tmp:
        served = start_leasegate(Path(tmp) / "data", ENV)
        try:
            port = int(served.url.rsplit(":", 1)[1])
            trio.run(run, served.url, served.keys, served.pid, args.polls, args.clients, port)
        finally:
            stop(served)
    return 0


if __name__ == "__main__":
    sys.exit(main())
