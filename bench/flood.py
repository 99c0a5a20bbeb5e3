"""leasegate flood bench: one client key opens N long-polls; what the server holds,
refuses and gives back.

One run (``.venv/bin/python bench/flood.py [--polls N] [--clients C] [--addresses A]``,
about a minute) raises this process's file-descriptor limit, starts ``leasegate serve``
on a fresh data dir (its log in a file; per-key and per-address rate limits off, so
that the bounds on parked polls and connections are what answers), submits one query
Q that nobody leases, and then:

1. C client processes open N raw loopback sockets between them (at most 128 connects
   in flight each, from A source addresses 127.0.0.1 ..), each sending
   ``GET /v1/queries/Q?wait_seconds=30`` with the one client key and reading what
   comes back: a 429 (with ``Retry-After``), nothing yet (parked), or the connection
   closed without an answer (refused at accept; a failed connect counts there too);
2. prints those counts, and the server's VmRSS and open descriptors before the flood
   and with everything open;
3. closes every socket and prints how long until the server's descriptors are back
   (or where they are after 100 s), and its VmRSS then;
4. counts the server log's ``Traceback`` lines and its lines about EMFILE.

Everything stays on loopback, every loop has a count or a deadline.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import share_out
from _readings import rss_kib
from _report import say
from _servers import HOST, start_leasegate, stop

ENV = {"LEASEGATE_RATE_LIMIT_PER_SECOND": "0", "LEASEGATE_ADDRESS_RATE_LIMIT_PER_SECOND": "0"}
CONNECTS_IN_FLIGHT = 128  # per client process: within the server's backlog (1024)
CONNECT_TIMEOUT = 10.0
SETTLE_SECONDS = 2.0  # no new answer for this long: the flood has settled
FLOOD_SECONDS = 120.0  # the whole flood, at most
RECOVERY_SECONDS = 100.0


def raise_fd_limit() -> int:
    """Soft to hard; returns the new soft limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---- the flooding clients (one process each) ---------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.last_change = time.monotonic()

    def add(self, outcome: str) -> None:
        self.counts[outcome] += 1
        self.last_change = time.monotonic()


async def read_answer(sock: trio.socket.SocketType, tally: Tally) -> None:
    """Classify the first bytes the server sends on ``sock`` (parked until then)."""
    try:
        head = await sock.recv(4096)
    except OSError:
        head = b""
    if not head:
        tally.add("refused")
    elif head.startswith(b"HTTP/1.1 429 ") and b"\r\nretry-after: " in head.lower():
        tally.add("429")
    else:
        tally.add(f"HTTP {head[9:12].decode(errors='replace')}")
    tally.counts["parked"] -= 1


async def flood(port: int, request: bytes, sources: list[str], first: int, count: int,
                pipe: Connection) -> None:
    pipe.send("ready")
    await trio.to_thread.run_sync(pipe.recv)  # go: every client starts at once
    tally = Tally()
    sockets: list[trio.socket.SocketType] = []
    limit = trio.Semaphore(CONNECTS_IN_FLIGHT)
    async with trio.open_nursery() as readers:

        async def connect(n: int) -> None:
            async with limit:
                sock = trio.socket.socket()
                sockets.append(sock)
                try:
                    await sock.bind((sources[n % len(sources)], 0))
                    with trio.fail_after(CONNECT_TIMEOUT):
                        await sock.connect((HOST, port))
                    await sock.send(request)
                except (OSError, trio.TooSlowError):
                    tally.add("refused")
                    return
            tally.counts["parked"] += 1
            readers.start_soon(read_answer, sock, tally)

        with trio.move_on_after(FLOOD_SECONDS):
            async with trio.open_nursery() as connects:
                for n in range(first, first + count):
                    connects.start_soon(connect, n)
            for _ in range(int(FLOOD_SECONDS / 0.2)):  # until no answer came for a while
                if time.monotonic() - tally.last_change >= SETTLE_SECONDS:
                    break
                await trio.sleep(0.2)
        pipe.send(dict(tally.counts))
        await trio.to_thread.run_sync(pipe.recv)  # the bench's word to hang up
        readers.cancel_scope.cancel()
    for sock in sockets:
        sock.close()
    pipe.send("closed")


def client_process(port: int, request: bytes, sources: list[str], first: int, count: int,
                   pipe: Connection) -> None:
    raise_fd_limit()
    trio.run(flood, port, request, sources, first, count, pipe)


# ---- the bench ----------------------------------------------------------------------------


def poll_request(port: int, key: str, query_id: str) -> bytes:
    return (f"GET /v1/queries/{query_id}?wait_seconds=30 HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Authorization: Bearer {key}\r\n\r\n").encode()


def memory(pid: int) -> str:
    return f"VmRSS {rss_kib(pid) / 1024:.1f} MiB, {open_fds(pid):,} fds"


async def recover(pid: int, fds_start: int) -> tuple[float, bool]:
    """Seconds until the server's descriptors are back (within 8), or
    RECOVERY_SECONDS; and whether they got there."""
    began = time.monotonic()
    while time.monotonic() - began < RECOVERY_SECONDS:
        if open_fds(pid) <= fds_start + 8:
            return time.monotonic() - began, True
        await trio.sleep(0.1)
    return time.monotonic() - began, False


async def run(pid: int, url: str, keys: dict[str, str], polls: int, clients: int,
              sources: list[str]) -> Counter[str]:
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"Authorization": f"Bearer {keys['client']}"}) as http:
        query = await http.post("/v1/queries", json={"site": "nobody", "kind": "flood",
                                                  "params": {}})
        query.raise_for_status()
        for _ in range(20):  # warm the code paths the flood takes
            (await http.get(f"/v1/queries/{query.json()['query_id']}")).raise_for_status()
    request = poll_request(port, keys["client"], query.json()["query_id"])
    rss_start, fds_start = rss_kib(pid), open_fds(pid)
    say(f"  server before the flood: {memory(pid)}")

    pipes, processes = share_out(client_process, polls, clients, port, request, sources)
    for process in processes:
        process.start()
    for pipe in pipes:
        await trio.to_thread.run_sync(pipe.recv)
    began = time.monotonic()
    for pipe in pipes:
        pipe.send("go")
    counts: Counter[str] = Counter()
    for pipe in pipes:
        counts.update(await trio.to_thread.run_sync(pipe.recv))
    took = time.monotonic() - began
    answered = counts["429"] + sum(n for k, n in counts.items() if k.startswith("HTTP"))
    say(f"  {polls:,} polls sent in {took:.1f} s: {counts['parked'] + answered:,} accepted "
        f"({counts['parked']:,} no answer yet: parked, {counts['429']:,} answered 429 with "
        "Retry-After"
        + "".join(f", {n:,} answered {k} (their 30 s over)" for k, n in sorted(counts.items())
                  if k.startswith("HTTP"))
        + f"), {counts['refused']:,} refused")
    say(f"  server with the flood open: {memory(pid)}")

    for pipe in pipes:
        pipe.send("hang up")
    for pipe in pipes:
        await trio.to_thread.run_sync(pipe.recv)
    say(f"  server as the clients hang up: {memory(pid)}")
    seconds, back = await recover(pid, fds_start)
    verdict = "descriptors back" if back else "descriptors NOT back"
    say(f"  server {seconds:.1f} s after: {memory(pid)} ({verdict}: "
        f"{rss_start / 1024:.1f} MiB at the start)")
    for process in processes:
        process.join(5)
    counts["back"] = int(back)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--addresses", type=int, default=1, choices=range(1, 201),
                        metavar="1-200", help="loopback source addresses 127.0.0.1 ..")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a LEASEGATE_ setting for the server (repeatable)")
    args = parser.parse_args()
    limit = raise_fd_limit()
    sources = [f"127.0.0.{1 + i}" for i in range(args.addresses)]
    env = {**ENV, **dict(pair.split("=", 1) for pair in args.env)}
    say(f"leasegate flood bench: {args.polls:,} GET /v1/queries/Q?wait_seconds=30 from one "
        f"client key, {args.clients} client processes, {len(sources)} source address(es); "
        f"fd limit {limit:,}; rate limits off")
    with tempfile.TemporaryDirectory(prefix="leasegate-flood-") as tmp:
        log = Path(tmp) / "server.log"
        served = start_leasegate(Path(tmp) / "data", env, log=log, log_level="INFO")
        try:
            counts = trio.run(run, served.pid, served.url, served.keys, args.polls,
                              args.clients, sources)
        finally:
            stop(served)
        text = log.read_text()
        say(f"  server log: {text.count('Traceback')} Traceback lines, "
            f"{text.count('EMFILE')} lines naming EMFILE, {len(text.splitlines())} lines")
        shown = [line for line in text.splitlines() if "EMFILE" in line or "Traceback" in line]
        for line in shown[:3]:
            say(f"    {line[:200]}")
    return 0 if counts["back"] else 1


if __name__ == "__main__":
    sys.exit(main())
