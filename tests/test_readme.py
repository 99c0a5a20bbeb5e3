"""The README's shell examples run as written against a served gateway, and nothing
the reader sees points at files that are not in this repository.

Every ```sh block of the README is either run here, in order, each in a fresh bash of
its own after the setup block, or marked with a ``<!-- not run: why -->`` line just
before it (it starts a server, needs another machine...)."""

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


NOT_RUN = re.compile(r"^<!-- not run: [^>]+ -->\n```sh\n", re.MULTILINE)


def shell_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)


def runnable_blocks() -> list[str]:
    """Every ``sh`` block but the setup block and those marked as not run, in order."""
    text = README.read_text()
    blocks = re.finditer(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    marked = {m.end() for m in NOT_RUN.finditer(text)}
    return [b[1] for b in blocks if b.start(1) not in marked
            and "export LEASEGATE_URL=" not in b[1]]


def quick_start() -> tuple[str, list[str]]:
    """The setup block without its placeholder line (the test sets those variables),
    and the quick starts of a query and a task, and the query retries example."""
    setup = [block for block in shell_blocks() if "export LEASEGATE_URL=" in block]
    assert len(setup) == 1, "one block says where the gateway is and which keys to use"
    lines = setup[0].splitlines()
    placeholders = [line for line in lines if SETUP_LINE.match(line)]
    assert len(placeholders) == 1, lines
    runnable = [block for start in ("Q=", "T=", "S=") for block in runnable_blocks()
                if block.startswith(start)]
    assert len(runnable) == 3, "a query and a task quick start, and a query's retries"
    return "\n".join(line for line in lines if line not in placeholders) + "\n", runnable


def run(gateway: served.Served, prelude: str, block: str) -> list[Any]:
    """Run ``block`` with bash as a reader would, in a fresh shell of the repository
    whose PATH has no virtualenv (the setup block puts ``.venv/bin`` on it); every JSON
    reply it printed, in order."""
    return json_replies(run_as_written(gateway, prelude, block))


def run_as_written(gateway: served.Served, prelude: str, block: str, *, cwd: Path = ROOT,
                   shell: dict[str, str] | None = None) -> str:
    """What ``block`` printed, run under ``set -euo pipefail`` (curl failing on an HTTP
    error) in a fresh bash, with ``shell`` set as an earlier block left it."""
    env = {**reader_env(gateway, gateway.keys["admin"], gateway.keys["worker"]),
           **(shell or {})}
    done = bash(STRICT + prelude + block, env, cwd=cwd)
    assert done.returncode == 0, (block, done.returncode, done.stdout, done.stderr)
    assert done.stderr == "", (block, done.stderr)  # no traceback, no curl error
    return done.stdout


def json_replies(text: str) -> list[Any]:
    decoder, replies, at = json.JSONDecoder(), [], 0
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


def bash(script: str, env: dict[str, str], *,
         cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=env, cwd=cwd, timeout=60,
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
    assert submitted["query_id"].startswith("statement-") and submitted["status"] == "queued"
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
    files = [README, *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "leasegate").rglob("*.py")),
             *sorted((ROOT / "tests").rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if OUTSIDE_FILES.search(line)]
    assert not found, "\n".join(found)


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[served.Served, Path]]:
    """A gateway of its own (whose webhooks may go to any address), and a directory like
    a reader's checkout after ``make run``: ``.venv`` (this one) and ``var`` (the
    gateway's data), so that what the examples write stays out of the repository."""
    with served.serving(tmp_path_factory.mktemp("readme-all"),
                        {"LEASEGATE_WEBHOOK_ALLOW_PRIVATE": "1"}) as gateway:
        home = tmp_path_factory.mktemp("checkout")
        (home / ".venv").symlink_to(ROOT / ".venv")
        (home / "var").symlink_to(gateway.data)
        yield gateway, home


def test_no_shell_example_hides_from_this_test() -> None:
    """A shell example is fenced ``sh`` (run here, or marked as not run), never
    ``bash``/``shell``/``console``, which this test would not see."""
    fences = re.findall(r"^```(\w*)", README.read_text(), re.MULTILINE)
    assert not {"bash", "shell", "console", "zsh"} & set(fences), fences
    run = "\n".join(runnable_blocks())
    for example in ("/v1/schedules/", "/v1/webhooks", "leasegate tasks show", "leasegate keys",
                    "leasegate sites", "leasegate schedules", "leasegate webhooks"):
        assert example in run, example


def test_every_shell_block_runs_in_order_and_again(
        reader_dir: tuple[served.Served, Path]) -> None:
    """Each block in a fresh shell after the setup block, as a reader pastes them one
    after the other, with the quick start's ``$Q`` and ``$T`` set as it left them; then
    all of them again (a second paste neither waits for ever nor fails)."""
    gateway, home = reader_dir
    prelude, _ = quick_start()
    for _ in range(2):
        shell: dict[str, str] = {}
        for block in runnable_blocks():
            out = run_as_written(gateway, prelude, block, cwd=home, shell=shell)
            if block.startswith(("Q=", "T=")):  # the quick start's ids, for later blocks
                first = json_replies(out)[0]
                shell[block[0]] = first.get("query_id") or first["task_id"]
    # The webhooks example's reply has the shape its comment shows.
    endpoint = json.loads((home / "endpoint.json").read_text())
    assert endpoint["endpoint_id"].startswith("ep_") and endpoint["secret"].startswith("whsec_")


def test_the_readme_links_lead_somewhere() -> None:
    """The contents' anchors name the README's sections, and every file it links to
    (docs/, the screenshots) is in the repository."""
    text = README.read_text()
    sections = {re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
                for title in re.findall(r"^## (.+)$", text, re.MULTILINE)}
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    anchors = [link[1:] for link in links if link.startswith("#")]
    assert anchors and set(anchors) <= sections, set(anchors) - sections
    assert set(anchors) == sections, "the contents list every section"
    files = [link for link in links if not link.startswith(("#", "http"))]
    assert "docs/benchmarks.md" in files and "docs/design-notes.md" in files
    assert all((ROOT / link).is_file() for link in files), files
