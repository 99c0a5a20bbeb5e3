"""Where one submit's server time goes, beside the bare route's: a table of stages.

``.venv/bin/python bench/stages.py [--requests 2000]`` serves, in a process of its own
each, leasegate (durable defaults, rate limits off; hypercorn and the app as
``leasegate serve`` runs them) and the bare Quart-Trio route of
``bench/baseline_app.py`` (on the same accept loop and hypercorn config), and has one
client process send ``POST /v1/queries`` one after another on one keep-alive
connection. Each stage is a function of the server wrapped with a timer: its CPU
(of the thread that ran it) and wall time, inclusive of what it calls:

* hypercorn outside the app, and the rest: the process's CPU less the app's and
  the storage thread's apply;
* the ASGI app: the connection class; Quart's request handling
  (``preprocess_request``: the before-request checks, auth; ``dispatch_request``:
  JSON, validation, the route; ``finalize_request``: the response, after-request
  hooks); the sending of the answer;
* inside the route: the mailbox round trip (``Ref.ask``), the actor's turn, the
  storage thread's apply and its commit (fsync).

One client, one request at a time: a stage's wall time is the server's time for
it, except where it waits (for the storage thread, for the disk). What one timer
costs is measured and printed; the collector's time per request too. A stage
whose function no longer exists is left out, said so. ``--profile N`` prints
cProfile's top N functions of leasegate's trio thread instead.
"""

from __future__ import annotations

import argparse
import functools
import gc
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import trio
from hypercorn.typing import AppWrapper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import say

CLIENT = r"""
import sys, httpx
url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = b'{"site": "bench", "kind": "echo", "params": {"n": 1}}'
headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
with httpx.Client(base_url=url, headers=headers) as client:
    for phase in ("warm", "done"):
        for _ in range(n if phase == "done" else max(200, n // 10)):
            reply = client.post("/v1/queries", content=body)
            assert reply.status_code == 201, reply.text
        print(phase, flush=True)
        if phase == "warm":
            sys.stdin.readline()
"""


ASGI = "ASGI app (all of Quart's and ours)"
APPLY = "apply + commit (storage thread)"
SEND = "send the answer (ASGI events, hypercorn)"


@dataclass
class Stage:
    label: str
    depth: int
    seconds: float = 0.0  # wall
    cpu: float = 0.0  # of the thread that ran it (trio's, or the storage thread's)
    calls: int = 0

    def add(self, began: float, cpu_began: float) -> None:
        self.seconds += time.perf_counter() - began
        self.cpu += time.thread_time() - cpu_began
        self.calls += 1


@dataclass
class Stages:
    measuring: bool = False
    gc_seconds: float = 0.0  # in the collector, every generation
    gc_runs: int = 0
    _gc_began: float = 0.0
    stages: list[Stage] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def wrap(self, owner: object, name: str, label: str, depth: int) -> None:
        """Time every call of ``owner.name`` (a function or method, sync or async)."""
        original = getattr(owner, name, None)
        if original is None:
            self.missing.append(f"{label} ({getattr(owner, '__name__', owner)}.{name})")
            return
        stage = Stage(label, depth)
        self.stages.append(stage)
        timing = self

        if inspect.iscoroutinefunction(original):
            @functools.wraps(original)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                began, cpu_began = time.perf_counter(), time.thread_time()
                try:
                    return await original(*args, **kwargs)
                finally:
                    if timing.measuring:
                        stage.add(began, cpu_began)
            setattr(owner, name, timed_async)
        else:
            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                began, cpu_began = time.perf_counter(), time.thread_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    if timing.measuring:
                        stage.add(began, cpu_began)
            setattr(owner, name, timed)

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` entry: the collector's time, while measuring."""
        if phase == "start":
            self._gc_began = time.perf_counter()
        elif self.measuring:
            self.gc_seconds += time.perf_counter() - self._gc_began
            self.gc_runs += 1

    def reset(self) -> None:
        for stage in self.stages:
            stage.seconds, stage.cpu, stage.calls = 0.0, 0.0, 0
        self.gc_seconds, self.gc_runs = 0.0, 0
        self.measuring = True


def instrument(stages: Stages, quart_app: Any) -> None:
    """The stages' timers, outermost first (the depth indents the table)."""
    from pydantic import TypeAdapter
    from quart.json.provider import DefaultJSONProvider
    from quart_trio.asgi import TrioASGIHTTPConnection

    from leasegate.actors.runtime import actor, mailbox
    from leasegate.http.routes import batches
    from leasegate.http.server import render

    connection = quart_app.asgi_http_class
    wrap = stages.wrap
    wrap(connection, "__call__", "request (connection class)", 1)
    wrap(type(quart_app), "handle_request", "Quart handle_request", 2)
    wrap(type(quart_app), "preprocess_request", "before-request hooks (auth, ids)", 3)
    wrap(type(quart_app), "dispatch_request", "dispatch (body, validation, route)", 3)
    wrap(type(quart_app.json), "loads", "JSON parse", 4)
    wrap(TypeAdapter, "validate_python", "validation (pydantic)", 4)
    wrap(mailbox.Ref, "ask", "mailbox ask: send, wait, reply", 4)
    wrap(actor.Actor, "_turn", "actor turn (trio side)", 5)
    wrap(actor.Actor, "_apply", APPLY, 6)
    wrap(actor, "commit", "commit (fsync)", 7)
    wrap(actor.Actor, "_answer", "once durable: effects, replies", 6)
    wrap(batches, "submitted", "reply to JSON", 4)
    wrap(render, "to_json", "render (to_json)", 5)
    wrap(type(quart_app), "finalize_request", "finalize (response, after-request)", 3)
    wrap(DefaultJSONProvider, "response", "JSON response", 4)
    wrap(TrioASGIHTTPConnection, "_send_response", SEND, 2)


async def serve_and_load(target: str, requests: int, data: Path, timers: bool = True
                         ) -> tuple[Stages, float, float]:
    """Serve ``target`` ("leasegate", or "bare": bench/baseline_app.py's route) as
    ``leasegate serve`` would, run the client; (stages, server CPU, wall) measured."""
    from hypercorn.utils import wrap_app

    from leasegate import server
    from leasegate.http.app import create_app
    from leasegate.http.server import expect
    from leasegate.http.server.listener import serve_http
    from leasegate.settings import load
    from leasegate.storage.datadir import db_path
    from leasegate.system import new_system

    os.environ["LEASEGATE_RATE_LIMIT_PER_SECOND"] = "0"
    settings = load()
    config = server.hypercorn_config(settings, "127.0.0.1", 0)
    sockets = server.listen(config, "127.0.0.1", 0)
    port = sockets.insecure_sockets[0].getsockname()[1]
    system = new_system(db_path(data), settings)
    if target == "bare":
        import baseline_app

        quart_app: Any = baseline_app.create_app()
    else:
        expect.install(settings)
        quart_app = create_app(system)
        quart_app.extensions["leasegate.connections"] = server.connection_gate(settings)
    stages = Stages()
    gc.callbacks.append(stages.on_gc)
    if timers:
        instrument(stages, quart_app)
    app = wrap_app(quart_app, config.wsgi_max_body_size, "asgi")
    asgi = Stage(ASGI, 0)

    async def timed_app(*args: Any) -> None:
        began, cpu_began = time.perf_counter(), time.thread_time()
        try:
            await app(*args)
        finally:
            if stages.measuring:
                asgi.add(began, cpu_began)

    stages.stages.insert(0, asgi)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(system.run)
        key = await _key(system)
        server.tune_gc()
        await nursery.start(partial(serve_http, cast(AppWrapper, timed_app), config, sockets,
                                    server.connection_gate(settings),
                                    shutdown_trigger=stop.wait))
        cpu, wall = await _drive(stages, f"http://127.0.0.1:{port}", key, requests)
        stop.set()
        system.close()
    return stages, cpu, wall


async def _key(system: Any) -> str:
    from leasegate.actors.keys.records import CreateKey

    created = await system.keys.ask(CreateKey("client", "stages", "default"))
    key: str = created.key
    return key


async def _drive(stages: Stages, url: str, key: str, requests: int) -> tuple[float, float]:
    argv = [sys.executable, "-c", CLIENT, url, key, str(requests)]
    client = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE)
    try:
        assert client.stdout is not None and client.stdin is not None
        lines = _lines(client.stdout)
        if await lines.__anext__() != "warm":
            raise RuntimeError("the client failed while warming up")
        stages.reset()
        cpu0, began = time.process_time(), time.perf_counter()
        await client.stdin.send_all(b"go\n")
        if await lines.__anext__() != "done":
            raise RuntimeError("the client failed")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - began
        stages.measuring = False
    finally:
        client.kill()
        await client.wait()
    return cpu, wall


async def _lines(stream: trio.abc.ReceiveStream) -> Any:
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            yield line.decode().strip()
        chunk = await stream.receive_some()
        if not chunk:
            return
        buffer += chunk


def as_dict(stages: Stages, cpu: float, wall: float, requests: int) -> dict[str, Any]:
    """One target's figures, per request in µs, for the parent to print."""
    per = 1e6 / requests
    by_label = {stage.label: stage for stage in stages.stages}
    outside = cpu - sum(by_label[label].cpu for label in (ASGI, APPLY) if label in by_label)
    return {"cpu": cpu * per, "wall": wall * per, "rest": outside * per,
            "gc": stages.gc_seconds * per, "gc_runs": stages.gc_runs / requests,
            "stages": [(s.label, s.depth, s.cpu * per, s.seconds * per, s.calls / requests)
                       for s in stages.stages], "missing": stages.missing}


def report(bare: dict[str, Any], ours: dict[str, Any], timer_us: float) -> None:
    say(f"server CPU per request (all threads): bare route {bare['cpu']:,.0f} us, "
        f"leasegate {ours['cpu']:,.0f} us ({ours['cpu'] / max(bare['cpu'], 1):.2f}x); wall "
        f"per request {bare['wall']:,.0f} / {ours['wall']:,.0f} us (client included)")
    say(f"garbage collection per request: bare {bare['gc']:,.0f} us "
        f"({bare['gc_runs']:.3f} runs), leasegate {ours['gc']:,.0f} us "
        f"({ours['gc_runs']:.3f} runs), inside the stages below")
    say()
    say(f"  {'stage (inclusive of what it calls), per request':<50} {'bare CPU':>9} "
        f"{'ours CPU':>9} {'ours wall':>10}")
    say(f"  {'hypercorn outside the app, GC, the rest':<50} {bare['rest']:>9,.0f} "
        f"{ours['rest']:>9,.0f}")
    theirs = {label: (cpu, calls) for label, _, cpu, _, calls in bare["stages"]}
    for label, depth, cpu, wall, calls in ours["stages"]:
        base, base_calls = theirs.get(label, (0.0, 0.0))
        shown = f"{base:>9,.0f}" if base_calls else f"{'-':>9}"
        name = "  " * depth + label
        if not calls:
            continue
        say(f"  {name:<50} {shown} {cpu:>9,.0f} {wall:>10,.0f}")
    for missing in ours["missing"]:
        say(f"  (not timed: {missing} is gone)")
    say(f"  (CPU: of the thread that ran the stage while it ran, other tasks' turns between "
        f"its awaits included; the storage\n   thread's stages are its own CPU. Each timer "
        f"costs about {timer_us:.1f} us, counted in every stage around it.)")


def timer_cost() -> float:
    """µs of CPU one timed call adds, measured on an empty coroutine."""

    class Empty:
        async def call(self) -> None:
            pass

    stages = Stages(measuring=True)
    stages.wrap(Empty, "call", "empty", 0)
    calls, empty = 20_000, Empty()

    async def run() -> float:
        began = time.thread_time()
        for _ in range(calls):
            await empty.call()
        timed = time.thread_time() - began
        return timed - stages.stages[0].cpu  # the call itself, beside the timer

    return trio.run(run) / calls * 1e6


def profile(requests: int, data: Path, top: int) -> int:
    """The trio thread's functions by own time, over the measured requests."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    original = Stages.reset

    def reset(self: Stages) -> None:
        original(self)
        profiler.enable()

    Stages.reset = reset  # type: ignore[method-assign]
    trio.run(serve_and_load, "leasegate", requests, data, False)
    profiler.disable()
    dump = os.environ.get("STAGES_PROFILE_DUMP")
    if dump:
        profiler.dump_stats(dump)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="instead of the timers, cProfile leasegate's trio thread and "
                             "print the N functions of most own time")
    parser.add_argument("--target", choices=("bare", "leasegate"),
                        help=argparse.SUPPRESS)  # one target, in a child: prints JSON
    args = parser.parse_args()
    if args.target:
        with tempfile.TemporaryDirectory(prefix="leasegate-stages-") as tmp:
            (Path(tmp) / "data").mkdir()
            figures = trio.run(serve_and_load, args.target, args.requests,
                               Path(tmp) / "data")
        print(json.dumps(as_dict(*figures, args.requests)))
        return 0
    say(f"one submit's stages: {args.requests} POST /v1/queries, one client, keep-alive, "
        f"beside the bare Quart-Trio route; machine load "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="leasegate-stages-") as tmp:
            (Path(tmp) / "data").mkdir()
            return profile(args.requests, Path(tmp) / "data", args.profile)
    results = {}
    for target in ("bare", "leasegate"):  # each in a process of its own, as served
        done = subprocess.run([sys.executable, __file__, "--target", target, "--requests",
                               str(args.requests)], capture_output=True, text=True,
                              check=True, timeout=600)
        results[target] = json.loads(done.stdout.strip().splitlines()[-1])
    report(results["bare"], results["leasegate"], timer_cost())
    return 0


if __name__ == "__main__":
    sys.exit(main())
