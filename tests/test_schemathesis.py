"""schemathesis against the served gateway, once per role: requests generated from
``/openapi.json`` (valid ones and, in fewer numbers, invalid ones) must get no 5xx,
answers that conform to the document (status, content type, headers, body) and no hang.

Bounded: ``EXAMPLES`` cases per operation, mode and role, generated deterministically
(``derandomize``) so that a failure here is the same on every run.
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
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests import served

EXAMPLES = {GenerationMode.POSITIVE: 4, GenerationMode.NEGATIVE: 2}
HANG = 5.0  # seconds; long-polls are cut to MAX_WAIT below, so nothing legal takes this long
MAX_WAIT = "0.05"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    # Long-polls answer at once, and no 429 hides what a route would have said.
    gateway = served.start(tmp_path_factory.mktemp("schemathesis"), {
        "LEASEGATE_MAX_WAIT_SECONDS": MAX_WAIT, "LEASEGATE_RATE_LIMIT_PER_SECOND": "0"})
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


def exercise(schema: Any, role: str, gateway: served.Served) -> list[str]:
    """Every operation of ``schema`` with ``role``'s key; what went wrong, if anything."""
    failures: list[str] = []
    # One keep-alive session for every case: an early answer must leave it usable.
    headers = {"Authorization": f"Bearer {gateway.keys[role]}"}
    with requests.Session() as session:
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode, examples in EXAMPLES.items():

                @hypothesis.settings(max_examples=examples, derandomize=True, database=None,
                                     deadline=None, phases=[Phase.explicit, Phase.generate],
                                     suppress_health_check=list(HealthCheck))
                @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
                def one(case: Any) -> None:
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


@pytest.mark.parametrize("role", served.ROLES)
def test_the_served_gateway_keeps_its_contract(gateway: served.Served, role: str) -> None:
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    failures = exercise(schema, role, gateway)
    assert not failures, "\n".join(failures)
