"""schemathesis against the served gateway, once per role (admin, worker, client, and no
key at all; two roles in each of test_schemathesis.py and test_schemathesis_roles.py,
each module its own served gateway, so that two test processes share the work).

Each role is one ``st run ... --checks all`` (schemathesis' own command line, settings
in tests/schemathesis.toml), so every check schemathesis has runs, and what it reports
is what a user running it would see. Requests drawn from ``/openapi.json``, valid and
invalid, in all its phases (examples, coverage, fuzzing, and stateful sequences along
the links it infers, e.g. a submit then a read of what it made), must get no 5xx and
answers that conform to the document (status, content type, headers, body, ``Allow``)
within ``HANG`` seconds; and the document must say every rule the server enforces:

- a request the document allows is not refused as invalid (``positive_data_acceptance``:
  2xx, or a refusal that is no judgement of the request's form, such as 401, 402, 403,
  404, 409 or 429);
- a request the document forbids is refused (``negative_data_rejection``: 4xx);
- a method the document does not list for a path is a 405 with ``Allow``
  (``unsupported_method``), a required header left out is refused
  (``missing_required_header``), a route needing a key refuses the request without
  it (``ignored_auth``); what a call made can be read (``ensure_resource_availability``)
  and what a delete removed cannot (``use_after_free``).

Bounded: at most ``EXAMPLES`` fuzzed cases per operation (and stateful scenarios) for
each key, on top of the coverage phase's deterministic cases (most of them), generated
deterministically: about 3,000 requests a key, some 15 s of CPU for schemathesis and
6 s for the gateway; without a key, fuzzing alone, fewer. A failure's message is
schemathesis' report, with the ``curl`` that replays it. By hand, against a running
gateway::

    .venv/bin/st --config-file tests/schemathesis.toml run http://127.0.0.1:8470/openapi.json \\
        --checks all -H "Authorization: Bearer $KEY" --generation-deterministic
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import served

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = 6  # fuzzed cases per operation, with a key
# Without a key every answer but the public routes' is a 401: a few fuzzed cases per
# operation say so, and the coverage phase (methods, bounds; most of a key's cost) is
# left to the keys.
EXAMPLES_WITHOUT_KEY = 3
HANG = 5.0  # seconds; long-polls are cut to MAX_WAIT below, so nothing legal takes this long
MAX_WAIT = "0.05"
RUN_TIMEOUT = 600  # seconds for one role's whole run: a stuck run fails, not hangs


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    # Long-polls answer at once, and no 429 hides what a route would have said. A
    # webhook url is checked for its form alone (webhook_allow_private): where its host
    # resolves is DNS's answer, which no schema can say (the url's description says
    # that a gateway without the setting refuses private and unresolvable hosts).
    gateway = served.start(tmp_path_factory.mktemp("schemathesis"), {
        "LEASEGATE_MAX_WAIT_SECONDS": MAX_WAIT, "LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
        "LEASEGATE_ADDRESS_RATE_LIMIT_PER_SECOND": "0",
        "LEASEGATE_WEBHOOK_ALLOW_PRIVATE": "1"})
    try:
        with gateway.client("client") as client:  # something for the lists and reads
            for path, body in [("/v1/tasks", {"task_id": "t-1", "site": "shop", "kind": "k"}),
                               ("/v1/queries", {"query_id": "q-1", "site": "shop",
                                                "kind": "k"})]:
                assert client.post(path, json=body).status_code == 201
        yield gateway
    finally:
        served.stop(gateway)


def st_run(gateway: served.Served, role: str | None) -> list[str]:
    """The ``st run`` command line for ``role``'s key (None: no key)."""
    command = [sys.executable, "-m", "schemathesis.cli", "--no-color",
               "--config-file", str(CONFIG), "run", f"{gateway.url}/openapi.json",
               "--checks", "all",
               "--phases", "examples,coverage,fuzzing,stateful" if role else "examples,fuzzing",
               "--max-examples", str(EXAMPLES if role else EXAMPLES_WITHOUT_KEY),
               "--generation-deterministic",
               "--request-timeout", str(HANG), "--workers", "1"]
    if role:
        command += ["--header", f"Authorization: Bearer {gateway.keys[role]}"]
    return command


def keeps_its_contract(gateway: served.Served, role: str | None, workdir: Path) -> None:
    """The test: every operation of the served ``/openapi.json`` with ``role``'s key."""
    run = subprocess.run(st_run(gateway, role), cwd=workdir, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT, check=False)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20_000:]
    # Every operation was tested (a document schemathesis could not read tests none).
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", report)
    assert selected is not None, report[-5_000:]
    assert len(set(selected.groups())) == 1 and int(selected[1]) > 40, selected[0]
