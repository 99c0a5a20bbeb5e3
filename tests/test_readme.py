"""The README's curl quick starts run as written against a served gateway, and nothing
the reader sees points at files that are not in this repository."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import served

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SETUP_LINE = re.compile(r"^export LEASEGATE_URL=\S+ LEASEGATE_ADMIN_KEY=lg_\.\.\. "
                        r"CLIENT_KEY=lg_\.\.\. WORKER_KEY=lg_\.\.\.$")
# Spelled in pieces so that this file does not match itself.
OUTSIDE_FILES = re.compile("|".join([
    r"\b(?:API|DESIGN)" + r"\.md\b",
    r"\bseeds?" + r"(?:\s+\d+\b|/)",
]), re.IGNORECASE)
# Like a reader's shell that stops at the first failure; curl fails on a 4xx/5xx
# (and still prints the error body).
STRICT = "set -euo pipefail\ncurl() { command curl --show-error --fail-with-body \"$@\"; }\n"


def shell_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)


def quick_start() -> tuple[str, list[str]]:
    """The setup block without its placeholder line (the test sets those variables),
    and the blocks that talk to the gateway (those that use ``$LG``)."""
    setup = [block for block in shell_blocks() if "export LEASEGATE_URL=" in block]
    assert len(setup) == 1, "one block says where the gateway is and which keys to use"
    lines = setup[0].splitlines()
    placeholders = [line for line in lines if SETUP_LINE.match(line)]
    assert len(placeholders) == 1, lines
    runnable = [block for block in shell_blocks() if "$LG" in block]
    assert len(runnable) == 3, "a query and a task quick start, and a query's retries"
    return "\n".join(line for line in lines if line not in placeholders) + "\n", runnable


def run(gateway: served.Served, prelude: str, block: str) -> list[Any]:
    """Run ``block`` with bash as a reader would, in a fresh shell of the repository
    whose PATH has no virtualenv (the setup block puts ``.venv/bin`` on it); every JSON
    reply it printed, in order."""
    done = bash(STRICT + prelude + block, reader_env(gateway, gateway.keys["admin"],
                                                     gateway.keys["worker"]))
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stderr == "", done.stderr  # no traceback, no curl error
    decoder, text, replies, at = json.JSONDecoder(), done.stdout, [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        reply, at = decoder.raw_decode(text, at)
        replies.append(reply)
    return replies


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    with served.serving(tmp_path_factory.mktemp("readme")) as gateway:
        yield gateway


def test_the_quick_starts_run_as_written(gateway: served.Served) -> None:
    prelude, (queries, tasks, _) = quick_start()

    replies = run(gateway, prelude, queries)
    submitted, read_back = replies[0], replies[-1]
    assert submitted["query_id"].startswith("balance-")
    assert read_back["status"] == "succeeded" and read_back["result"] == {"balance": 12}

    replies = run(gateway, prelude, tasks)
    order = replies[0]["task_id"]
    orders = [r for r in replies[:-1] if r.get("task_id") == order and "status" in r]
    assert [r["status"] for r in orders] == ["queued", "running", "succeeded", "succeeded"]
    assert orders[-1]["result"] == {"orders": ["A-1001"]}
    renewed = [r for r in replies if "cancel_requested" in r and "status" not in r]
    assert renewed, replies  # the renew reply (it carries cancel and pause requests)
    canceled, workers, shown = replies[-3:]
    assert (canceled["task_id"], canceled["status"]) == (f"{order}-b", "canceled")
    assert [w["worker_id"] for w in workers["items"]] == ["desk-1"]  # the admin key's view
    assert (shown["task_id"], shown["status"]) == (order, "succeeded")  # the CLI's view


def test_the_quick_start_lease_survives_an_empty_lease(gateway: served.Served) -> None:
    """Nothing to lease at first: the loop asks again (no IndexError, no call with an
    empty token) and keeps the token of the query submitted meanwhile."""
    prelude, (queries, _, _) = quick_start()
    lease = re.search(r"^TOKEN=\n(while .*?^done\n)", queries, re.MULTILINE | re.DOTALL)
    assert lease, queries
    quick = lease[0].replace('"wait_seconds": 20', '"wait_seconds": 1')
    submit_later = ("(sleep 1.5; command curl -s -o /dev/null -XPOST $LG/v1/queries "
                    "-H \"Authorization: Bearer $CLIENT_KEY\" -H 'Content-Type: application/json' "
                    "-d '{\"query_id\": \"late-1\", \"site\": \"shop\", \"kind\": \"k\"}') &\n")
    show = """python3 -c 'import json, sys; print(json.dumps({"token": sys.argv[1]}))' "$TOKEN"\n"""
    before = lease_calls(gateway)
    [leased] = run(gateway, prelude, submit_later + quick + show)
    assert leased["token"]
    assert lease_calls(gateway) - before >= 2  # the first came back empty
    with gateway.client("admin") as admin:
        assert admin.get("/v1/queries/late-1").json()["status"] == "leased"


def reader_env(gateway: served.Served, admin_key: str, worker_key: str) -> dict[str, str]:
    """What a reader's fresh shell has after the setup line: no virtualenv on PATH."""
    path = ":".join(part for part in os.environ["PATH"].split(":")
                    if not (Path(part) / "leasegate").exists())
    return {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"),
            "LEASEGATE_URL": gateway.url, "LEASEGATE_ADMIN_KEY": admin_key,
            "CLIENT_KEY": gateway.keys["client"], "WORKER_KEY": worker_key}


def bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=env, cwd=ROOT, timeout=60,
                          capture_output=True, text=True, check=False)


def test_the_quick_starts_run_again_as_pasted(gateway: served.Served) -> None:
    """A second run in the same shell makes new jobs and leases them: it does not wait
    for ever on a replayed submit that is already done."""
    prelude, (queries, tasks, _) = quick_start()
    for block in (queries, tasks):
        first, again = run(gateway, prelude, block)[0], run(gateway, prelude, block)[0]
        assert first["created"] and again["created"] and first != again


def test_the_quick_start_with_a_wrong_key_says_so(gateway: served.Served) -> None:
    """The lease loop with a key the gateway does not know stops with the error's
    message, not a Python traceback."""
    prelude, (queries, _, _) = quick_start()
    done = bash(STRICT + prelude + queries, reader_env(gateway, gateway.keys["admin"],
                                                        "lg_not_a_key"))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "error: " in done.stderr, done.stderr


def test_the_query_retries_example_runs_as_written(gateway: served.Served) -> None:
    prelude, (_, _, retries) = quick_start()
    submitted, snoozed, failed, done = run(gateway, prelude, retries)
    assert (submitted["query_id"], submitted["status"]) == ("statement-1", "queued")
    assert (snoozed["status"], snoozed["attempts"], snoozed["errors"]) == ("queued", 0, [])
    assert (failed["status"], failed["attempts"]) == ("queued", 1)
    assert failed["next_attempt_at"] is not None and failed["error"] is None
    assert (done["status"], done["attempts"], done["result"]) == ("succeeded", 2, {"lines": 3})
    assert [(e["attempt"], e["code"], e["message"]) for e in done["errors"]] == [
        (1, 503, "bank offline")]


def lease_calls(gateway: served.Served) -> float:
    with gateway.client("admin") as admin:
        text = admin.get("/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.labels.get("route") == "/v1/queries/lease"
               and s.name == "leasegate_http_requests_total")


def test_nothing_points_at_files_outside_the_repository() -> None:
    files = [README, *sorted((ROOT / "leasegate").rglob("*.py")),
             *sorted((ROOT / "tests").rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if OUTSIDE_FILES.search(line)]
    assert not found, "\n".join(found)
