"""schemathesis against the served gateway, once per role (admin, worker, client, and no
key at all; two roles in each of test_schemathesis.py and test_schemathesis_roles.py,
each module its own served gateway, so that two test processes share the work):
requests generated from ``/openapi.json``, valid ones and invalid ones, must get no
5xx, answers that conform to the document (status, content type, headers, body) and no
hang; and the document must say every rule the server enforces:

- a request the document allows is not refused as invalid (``positive_data_acceptance``:
  2xx, or a refusal that is no judgement of the request's form, such as 401, 402, 403,
  404, 409 or 429);
- a request the document forbids is refused (``negative_data_rejection``: 4xx).

Bounded: ``EXAMPLES`` cases per operation and mode for each key (fewer without one:
every answer is then 401, or a routing 404/405), generated with ``derandomize``: about
2,100 requests in all (628 per key, 238 without), some 60 s of CPU in all (mostly
hypothesis drawing the cases: 15-18 s a key, 6 s without).
Generation also draws on what the gateway answered, so a rare case may differ between
runs; a failure's message has the ``curl`` that replays it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests import served

EXAMPLES = {GenerationMode.POSITIVE: 8, GenerationMode.NEGATIVE: 8}
EXAMPLES_WITHOUT_KEY = {GenerationMode.POSITIVE: 3, GenerationMode.NEGATIVE: 3}
HANG = 5.0  # seconds; long-polls are cut to MAX_WAIT below, so nothing legal takes this long
MAX_WAIT = "0.05"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance,
          positive_data_acceptance, negative_data_rejection]
# What a valid request may still get: nothing here says its form was wrong.
ACCEPTED = ["2xx", "401", "402", "403", "404", "409", "429"]
# Each role's key goes with every request (below), so no case is made "invalid" by
# leaving the Authorization header out: that would be a request nobody sent.
CONFIG = SchemathesisConfig.from_dict({
    "generation": {"with-security-parameters": False},
    "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    # Long-polls answer at once, and no 429 hides what a route would have said.
    gateway = served.start(tmp_path_factory.mktemp("schemathesis"), {
        "LEASEGATE_MAX_WAIT_SECONDS": MAX_WAIT, "LEASEGATE_RATE_LIMIT_PER_SECOND": "0",
        "LEASEGATE_ADDRESS_RATE_LIMIT_PER_SECOND": "0"})
    try:
        with gateway.client("client") as client:  # something for the lists and reads
            for path, body in [("/v1/tasks", {"task_id": "t-1", "site": "shop", "kind": "k"}),
                               ("/v1/queries", {"query_id": "q-1", "site": "shop",
                                                "kind": "k"})]:
                assert client.post(path, json=body).status_code == 201
        yield gateway
    finally:
        served.stop(gateway)


def describe(case: Any, problem: object) -> str:
    return f"{case.method} {case.formatted_path} {case.query or ''}: {problem}"[:2000]


def exercise(schema: Any, role: str | None, gateway: served.Served) -> list[str]:
    """Every operation of ``schema`` with ``role``'s key; what went wrong, if anything."""
    failures: list[str] = []
    # One keep-alive session for every case: an early answer must leave it usable.
    headers = {"Authorization": f"Bearer {gateway.keys[role]}"} if role else {}
    with requests.Session() as session:
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode, examples in (EXAMPLES if role else EXAMPLES_WITHOUT_KEY).items():
                positive = mode is GenerationMode.POSITIVE

                @hypothesis.settings(max_examples=examples, derandomize=True, database=None,
                                     deadline=None, phases=[Phase.explicit, Phase.generate],
                                     suppress_health_check=list(HealthCheck))
                @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
                def one(case: Any) -> None:
                    # JSON Schema cannot tell 100.0 from 100, but the gateway takes only
                    # the latter as an integer (as the document's description says).
                    hypothesis.assume(not (positive and _integral_floats(case.body)))  # noqa: B023
                    try:
                        response = case.call(session=session, headers=headers, timeout=HANG)
                    except requests.Timeout:
                        failures.append(describe(case, f"no answer within {HANG} s"))
                        return
                    try:
                        case.validate_response(response, checks=CHECKS, headers=headers)
                    except (AssertionError, FailureGroup) as failure:
                        failures.append(describe(case, f"{response.status_code} {failure}"))

                try:
                    one()
                except hypothesis.errors.Unsatisfiable:
                    # Nothing to make invalid (no parameters, no body): no negative cases.
                    assert mode is GenerationMode.NEGATIVE, operation.label
    return failures


def _integral_floats(value: object) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_integral_floats(v) for v in value.values())
    if isinstance(value, list):
        return any(_integral_floats(v) for v in value)
    return False


def keeps_its_contract(gateway: served.Served, role: str | None) -> None:
    """The test: every operation of the served ``/openapi.json`` with ``role``'s key."""
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json", config=CONFIG)
    failures = exercise(schema, role, gateway)
    assert not failures, "\n".join(failures)
