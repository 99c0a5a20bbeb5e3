"""Shutdown of a served process, and Ctrl-C on an SDK worker (wall clock, kept short).

During the drain every request is answered (503, 5030, ``Retry-After``), never
dropped; the process then exits 0 in bounded time; a second signal exits at
once with 128 + signal and one line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from leasegate.client._errors import Unavailable, error_from_response
from leasegate.client._http import retryable
from tests.served import Served, start

DRAIN = 0.8


def rest_of_output(served: Served) -> str:
    assert served.process.stdout is not None
    return served.process.stdout.read()


def assert_draining_answer(reply: httpx.Response) -> None:
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == 5030
    assert reply.headers["Retry-After"] == "1"
    assert reply.headers["Connection"] == "close"


def test_drain_answers_every_request_then_exits_0(tmp_path: Path) -> None:
    served = start(tmp_path / "var", {"LEASEGATE_DRAIN_SECONDS": str(DRAIN)})
    try:
        with served.client("worker") as worker, served.client("client") as busy:
            assert busy.get("/v1/queries", params={"limit": 1}).status_code == 200
            parked: list[httpx.Response] = []
            poll = threading.Thread(target=lambda: parked.append(worker.post(
                "/v1/tasks/lease", json={"worker_id": "w", "wait_seconds": 20})))
            poll.start()
            time.sleep(0.3)  # the long-poll is parked
            signalled = time.monotonic()
            served.process.send_signal(signal.SIGINT)
            poll.join(timeout=5)
            assert parked[0].status_code == 200 and parked[0].json() == {"items": []}
            # The worker's keep-alive connection is answered, not dropped.
            again = worker.post("/v1/tasks/lease", json={"worker_id": "w", "wait_seconds": 5})
            assert_draining_answer(again)
            error = error_from_response(again)
            assert isinstance(error, Unavailable) and retryable(error)
            assert error.retry_after == 1.0
            answered = 0
            while time.monotonic() - signalled < DRAIN * 0.6:  # clear of the drain's end
                assert_draining_answer(busy.get("/v1/queries", params={"limit": 1}))
                assert_draining_answer(busy.post("/v1/queries", json={"site": "s", "kind": "k"}))
                answered += 2
            assert answered >= 4
        assert served.process.wait(timeout=DRAIN + 5) == 0
        assert time.monotonic() - signalled < DRAIN + 3
        assert "Traceback" not in rest_of_output(served)
    finally:
        if served.process.poll() is None:
            served.process.kill()


def test_second_signal_exits_at_once_with_one_line(tmp_path: Path) -> None:
    served = start(tmp_path / "var", {"LEASEGATE_DRAIN_SECONDS": "20"})
    try:
        served.process.send_signal(signal.SIGINT)
        with served.client("client") as upstream:
            deadline = time.monotonic() + 5
            while upstream.get("/v1/queries").status_code != 503:  # the drain has begun
                assert time.monotonic() < deadline
        second = time.monotonic()
        served.process.send_signal(signal.SIGINT)
        assert served.process.wait(timeout=5) == 130
        assert time.monotonic() - second < 3
        assert rest_of_output(served) == (
            "leasegate: second SIGINT: stopped without finishing the drain\n")
    finally:
        if served.process.poll() is None:
            served.process.kill()


SYNC_WORKER = """
import sys
from leasegate.client import Worker
worker = Worker(sys.argv[1], sys.argv[2], "desk-sync")
print("ready", flush=True)
worker.run(lambda job: {})
"""

TRIO_WORKER = """
import sys
import trio
from leasegate.client import AsyncWorker

async def main() -> None:
    async with AsyncWorker(sys.argv[1], sys.argv[2], "desk-trio") as worker:
        print("ready", flush=True)
        await worker.run(lambda job: {})

trio.run(main)
"""


def test_ctrl_c_on_a_worker_is_one_line(served: Served) -> None:
    """Sync and trio workers side by side (one server): one warning line each, no
    traceback, and ``run`` returns."""
    workers = [subprocess.Popen([sys.executable, "-c", script, served.url, served.keys["worker"]],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for script in (SYNC_WORKER, TRIO_WORKER)]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        time.sleep(0.4)  # in their long-polls
        for worker in workers:
            worker.send_signal(signal.SIGINT)
        for worker in workers:
            _, err = worker.communicate(timeout=10)
            assert worker.returncode == 0
            [line] = err.splitlines()
            assert "interrupted, stopped" in line and "left to its lease" in line
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
