"""``/openapi.json`` describes every route the gateway serves and is valid OpenAPI 3.1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import trio
from openapi_spec_validator import validate

from leasegate.clock import Clock
from leasegate.http.openapi.text import sections as openapi_sections
from leasegate.http.openapi.text import tag_of
from leasegate.ids import ID_PATTERN
from leasegate.settings import Settings, load
from tests.conftest import Gateway, start_gateway

ENVELOPE = {"$ref": "#/components/schemas/ErrorEnvelope"}
AUTH_ERRORS = {"401", "403", "429"}

# The task, query and operations routes (plus GET /v1/workers); the ledger and
# devices do not exist yet.
ROUTES = {
    ("post", "/v1/tasks"),
    ("get", "/v1/tasks/{task_id}"),
    ("get", "/v1/tasks"),
    ("post", "/v1/tasks/{task_id}/cancel"),
    ("post", "/v1/tasks/lease"),
    ("post", "/v1/tasks/{task_id}/start"),
    ("post", "/v1/tasks/{task_id}/renew"),
    ("post", "/v1/tasks/{task_id}/result"),
    ("post", "/v1/tasks/{task_id}/reclaim"),
    ("put", "/v1/tasks/{task_id}/artifacts/{name}"),
    ("get", "/v1/tasks/{task_id}/artifacts"),
    ("get", "/v1/tasks/{task_id}/artifacts/{name}"),
    ("post", "/v1/queries"),
    ("get", "/v1/queries/{query_id}"),
    ("get", "/v1/queries"),
    ("post", "/v1/queries/lease"),
    ("post", "/v1/queries/{query_id}/result"),
    ("get", "/health"),
    ("get", "/metrics"),
    ("post", "/v1/admin/keys"),
    ("get", "/v1/admin/keys"),
    ("delete", "/v1/admin/keys/{key_id}"),
    ("post", "/v1/admin/backup"),
    ("get", "/v1/workers"),
    ("get", "/v1/sites/tasks"),
    ("get", "/v1/sites/queries"),
}
PUBLIC = {("get", "/health"), ("get", "/openapi.json")}
NEVER_MISSING = {("post", "/v1/ledger/accounts/{account}/credit"),
                 ("post", "/v1/devices/{device_id}/heartbeat")}


async def fetch(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
                clock: Clock) -> dict[str, Any]:
    gateway = await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)
    response = await gateway.client.get("/openapi.json")  # no key needed
    assert response.status_code == 200
    document: dict[str, Any] = await response.get_json()
    return document


@pytest.fixture
async def document(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
                   clock: Clock) -> dict[str, Any]:
    return await fetch(nursery, tmp_path, settings, clock)


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method, path): operation
            for path, item in document["paths"].items()
            for method, operation in item.items()}


def json_schema(response: dict[str, Any]) -> Any:
    return response["content"]["application/json"]["schema"]


async def test_document_is_valid_openapi(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document)
    for (method, path), operation in operations(document).items():
        assert operation["responses"], (method, path)
        for code, response in operation["responses"].items():
            assert isinstance(code, str) and code.isdigit(), (method, path, code)
            assert response["description"], (method, path, code)
    ids = [op["operationId"] for op in operations(document).values()]
    assert len(ids) == len(set(ids))


async def test_every_route_is_described(document: dict[str, Any]) -> None:
    missing = ROUTES - set(operations(document))
    assert not missing


async def test_error_envelope_for_every_possible_status(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["ErrorEnvelope"]["properties"]["error"] == {
        "$ref": "#/components/schemas/ErrorInfo"}
    assert set(schemas["ErrorInfo"]["required"]) == {"code", "type", "message"}
    for key, operation in operations(document).items():
        path = key[1]
        responses = operation["responses"]
        # Every route refuses unknown query parameters (400), and any may meet
        # storage trouble or a server shutting down (503).
        expected: set[str] = {"400", "503"}
        if key not in PUBLIC:
            expected |= AUTH_ERRORS
        if "requestBody" in operation:
            expected |= {"408", "413"}
        if "{" in path and key not in NEVER_MISSING:
            expected.add("404")
        assert expected <= set(responses), (key, expected - set(responses))
        for code, response in responses.items():
            if int(code) >= 400:
                assert json_schema(response) == ENVELOPE, (key, code)
        for code in ("429", "503"):
            if code in responses:
                assert "Retry-After" in responses[code]["headers"], (key, code)
    ops = operations(document)
    # 409s documented by the routes stay.
    for key in [("post", "/v1/tasks"), ("post", "/v1/queries"),
                ("post", "/v1/tasks/{task_id}/cancel"), ("post", "/v1/tasks/{task_id}/start"),
                ("post", "/v1/tasks/{task_id}/renew"), ("post", "/v1/tasks/{task_id}/result"),
                ("post", "/v1/tasks/{task_id}/reclaim"),
                ("post", "/v1/queries/{query_id}/result")]:
        assert "409" in ops[key]["responses"], key


async def test_submits_document_the_replay(document: dict[str, Any]) -> None:
    ops = operations(document)
    for path in ("/v1/tasks", "/v1/queries"):
        responses = ops[("post", path)]["responses"]
        assert json_schema(responses["200"]) == json_schema(responses["201"])
        assert "created" in json_schema(responses["200"])["properties"]
        assert ops[("post", path)]["requestBody"]["required"] is True


async def test_raw_bodies(document: dict[str, Any]) -> None:
    ops = operations(document)
    metrics = ops[("get", "/metrics")]["responses"]["200"]
    assert metrics["content"] == {"text/plain": {"schema": {"type": "string"}}}

    download = ops[("get", "/v1/tasks/{task_id}/artifacts/{name}")]["responses"]["200"]
    assert download["content"]["application/octet-stream"]["schema"] == {
        "type": "string", "format": "binary"}
    assert "X-Artifact-Sha256" in download["headers"]

    upload = ops[("put", "/v1/tasks/{task_id}/artifacts/{name}")]
    assert upload["requestBody"]["required"] is True
    assert upload["requestBody"]["content"]["application/octet-stream"]["schema"] == {
        "type": "string", "format": "binary"}
    headers = {p["name"]: p for p in upload["parameters"] if p["in"] == "header"}
    assert set(headers) == {"X-Worker-Id", "X-Lease-Token"}
    assert all(p["required"] is True for p in headers.values())
    assert "201" in upload["responses"]
    assert "409" in upload["responses"]


async def test_security(document: dict[str, Any]) -> None:
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer"}
    for key, operation in operations(document).items():
        if key in PUBLIC:
            assert operation["security"] == [], key
            assert not {"401", "403"} & set(operation["responses"]), key
            assert {"429", "503"} <= set(operation["responses"]), key  # per address
        else:
            assert "security" not in operation, key  # the global bearer key


async def test_public_metrics_need_no_key(nursery: trio.Nursery, tmp_path: Path,
                                          clock: Clock) -> None:
    settings = load(environ={}, overrides={"sqlite_synchronous": "OFF",
                                           "unsafe_durability": True, "metrics_public": True})
    document = await fetch(nursery, tmp_path, settings, clock)
    metrics = operations(document)[("get", "/metrics")]
    assert metrics["security"] == []
    assert not {"401", "403"} & set(metrics["responses"])
    validate(document)


async def test_each_400_says_what_it_refuses(document: dict[str, Any]) -> None:
    ops = operations(document)

    def bad_request(method: str, path: str) -> str:
        text: str = ops[(method, path)]["responses"]["400"]["description"]
        assert text.startswith("invalid_request (4000): an unknown query parameter"), text
        return text

    assert "task_id" in bad_request("post", "/v1/tasks/{task_id}/cancel")
    assert "task_id" in bad_request("post", "/v1/tasks/{task_id}/pause")
    for action in ("pause", "resume", "result"):  # a conflict with what the task is
        assert "not a batch task" in ops[("post", f"/v1/tasks/{{task_id}}/{action}")][
            "responses"]["409"]["description"]
    assert "key_id" in bad_request("delete", "/v1/admin/keys/{key_id}")
    assert "without a tenant" in bad_request("post", "/v1/admin/keys")
    assert "Content-Type: application/json" in bad_request("post", "/v1/tasks")
    assert "artifact name" in bad_request("put", "/v1/tasks/{task_id}/artifacts/{name}")
    assert "value outside its rules" in bad_request("get", "/v1/tasks")
    assert bad_request("get", "/health").endswith("an unknown query parameter.")
    assert "request_timeout (4080)" in ops[("post", "/v1/tasks")]["responses"]["408"][
        "description"]


def request_schema(operation: dict[str, Any]) -> Any:
    return operation["requestBody"]["content"]["application/json"]["schema"]


def parameter(operation: dict[str, Any], name: str) -> Any:
    [found] = [p["schema"] for p in operation["parameters"] if p["name"] == name]
    return found


async def test_the_document_says_the_rules_the_server_enforces(
        document: dict[str, Any]) -> None:
    ops = operations(document)
    # Every id in a path has the id pattern; a credit goes to a tenant's account only.
    for (method, path), operation in ops.items():
        for p in operation["parameters"]:
            if p["in"] == "path" and p["name"] != "name":
                assert p["schema"]["pattern"].startswith("^["), (method, path, p)
    assert parameter(ops[("post", "/v1/devices/{device_id}/heartbeat")], "device_id")[
        "pattern"] == ID_PATTERN
    assert parameter(ops[("delete", "/v1/admin/keys/{key_id}")], "key_id")[
        "pattern"] == ID_PATTERN
    assert parameter(ops[("post", "/v1/ledger/accounts/{account}/credit")], "account")[
        "pattern"].startswith("^[A-Za-z0-9._:-]")  # no "@" first: a system account
    # A job id that names a route is no job id: not submitted, not read.
    reserved = {"not": {"enum": ["batch", "lease", "redrive", "results", "start"]}}
    for key in (("get", "/v1/tasks/{task_id}"), ("get", "/v1/queries/{query_id}")):
        read = ops[key]
        assert parameter(read, key[1].split("{")[1][:-1]).items() >= reserved.items()
        assert "route's name" in read["responses"]["405"]["description"]
    for path, name in (("/v1/tasks", "task_id"), ("/v1/queries", "query_id")):
        [given, _] = request_schema(ops[("post", path)])["properties"][name]["anyOf"]
        assert given.items() >= reserved.items()
    # /v1/events: every job_id an id, at most 100 of them.
    job_ids = parameter(ops[("get", "/v1/events")], "job_id")["anyOf"]
    assert job_ids[0]["pattern"] == ID_PATTERN
    assert (job_ids[1]["items"]["pattern"], job_ids[1]["maxItems"]) == (ID_PATTERN, 100)
    # A client key needs a tenant; sites are for worker keys.
    keys = request_schema(ops[("post", "/v1/admin/keys")])
    assert keys["allOf"][0] == {
        "if": {"required": ["role"], "properties": {"role": {"const": "client"}}},
        "then": {"required": ["tenant"], "properties": {"tenant": {"type": "string"}}}}
    assert keys["allOf"][1]["then"] == {"properties": {"sites": {"type": "null"}}}
    reclaim = request_schema(ops[("post", "/v1/tasks/{task_id}/reclaim")])
    assert reclaim["allOf"][0]["then"]["properties"]["cost"] == {"type": "null"}
    # not_before: a date-time (any: a past one is "now").
    not_before = request_schema(ops[("post", "/v1/tasks")])["properties"]["not_before"]
    assert not_before["anyOf"][0].items() >= {"type": "string", "format": "date-time"}.items()
    # Batch items are objects (a non-object is the call's 400), each answered alone.
    for path in ("/v1/tasks/batch", "/v1/queries/batch", "/v1/tasks/start",
                 "/v1/tasks/results", "/v1/queries/results"):
        items = request_schema(ops[("post", path)])["properties"]["items"]
        assert (items["minItems"], items["maxItems"]) == (1, 100)
        assert items["items"]["anyOf"][1] == {"type": "object"}, path
        assert items["items"]["anyOf"][0]["type"] == "object", path
    # Statuses a route answers beyond the common ones, each saying why.
    upload = ops[("put", "/v1/tasks/{task_id}/artifacts/{name}")]["responses"]
    assert "max_artifacts_per_task" in upload["409"]["description"]
    assert "max_artifact_bytes_per_task" in upload["413"]["description"]
    assert "max_workers_per_key" in ops[("post", "/v1/tasks/lease")]["responses"]["429"][
        "description"]
    assert "device_limit (6008)" in ops[("post", "/v1/tasks")]["responses"]["429"][
        "description"]
    assert "event_max_streams" in ops[("get", "/v1/events")]["responses"]["503"][
        "description"]


# ---- what /docs shows ----------------------------------------------------------------

async def test_docs_sections(document: dict[str, Any]) -> None:
    """Every operation in one section by what it acts on (Swagger UI put all of them
    under "default"), each section declared, in order, and described."""
    declared = [tag["name"] for tag in document["tags"]]
    assert declared[:3] == ["tasks", "queries", "workers"]
    assert all(tag.get("description") for tag in document["tags"]), document["tags"]
    ops = operations(document)
    used = {tag for operation in ops.values() for tag in operation["tags"]}
    assert all(len(operation["tags"]) == 1 for operation in ops.values())
    assert used == set(declared)
    sections = {
        ("post", "/v1/tasks"): "tasks", ("post", "/v1/tasks/{task_id}/cancel"): "tasks",
        ("get", "/v1/queries/{query_id}"): "queries",
        ("post", "/v1/tasks/lease"): "workers", ("post", "/v1/queries/results"): "workers",
        ("post", "/v1/tasks/{task_id}/renew"): "workers", ("get", "/v1/workers"): "workers",
        ("put", "/v1/tasks/{task_id}/artifacts/{name}"): "artifacts",
        ("get", "/v1/events"): "events", ("get", "/v1/tasks/{task_id}/events"): "events",
        ("post", "/v1/devices/{device_id}/heartbeat"): "devices",
        ("post", "/v1/ledger/accounts/{account}/credit"): "ledger",
        ("put", "/v1/sites/{site}/throttle"): "sites",
        ("post", "/v1/tasks/redrive"): "operator",
        ("post", "/v1/tasks/{task_id}/reclaim"): "operator",
        ("delete", "/v1/admin/keys/{key_id}"): "admin", ("get", "/health"): "monitoring",
    }
    assert {key: ops[key]["tags"][0] for key in sections} == sections


def test_a_new_resource_gets_a_section_of_its_own() -> None:
    """A route of a resource not described yet is shown in a section named after it
    (listed after the described ones), not under "default"."""
    assert tag_of("get", "/v1/gadgets/{gadget_id}") == "gadgets"
    paths = {"/v1/gadgets": {"post": {"tags": ["gadgets"]}},
             "/v1/tasks": {"post": {"tags": ["tasks"]}}}
    assert openapi_sections(paths)[-1] == {"name": "gadgets"}


async def test_docs_summaries_are_whole_sentences(document: dict[str, Any]) -> None:
    """A summary is the docstring's first sentence, whole (the first line of a wrapped
    docstring was cut mid-sentence); the rest is the description."""
    ops = operations(document)
    for key, operation in ops.items():
        summary = operation["summary"]
        assert summary.endswith((".", "?", "!")), (key, summary)
        assert summary.count("(") == summary.count(")") and "\n" not in summary, key
    task = ops[("get", "/v1/tasks/{task_id}")]
    assert task["summary"] == "A task (own tenant; admin: any)."
    assert task["description"].startswith("With `wait_seconds` (0–30) it long-polls until")
    health = ops[("get", "/health")]["summary"]
    assert health.startswith("No key needed: `ok` or `degraded` (storage failing,")
    assert health.endswith("three of its intervals) and counts.")
    assert "description" not in ops[("get", "/v1/workers")]  # one sentence: all summary


async def test_docs_text_is_markdown(document: dict[str, Any]) -> None:
    """reStructuredText's ``literal`` is Markdown's `literal` everywhere /docs shows."""
    assert "``" not in json.dumps(document)
    ops = operations(document)
    assert ops[("post", "/v1/tasks")]["description"] == "Idempotent by `task_id`."


async def test_docs_every_parameter_is_described(document: dict[str, Any]) -> None:
    for key, operation in operations(document).items():
        for p in operation["parameters"]:
            assert p.get("description"), (key, p["name"])
    listing = {p["name"]: p for p in operations(document)[("get", "/v1/tasks")]["parameters"]}
    assert listing["limit"]["description"] == "At most this many items in the page (1–500)."
    assert listing["status"]["description"] == "Only tasks in this status."


async def test_docs_version_is_the_packages(document: dict[str, Any]) -> None:
    assert document["info"]["version"] == version("leasegate")  # not "1"


# ---- the document promises nothing the server refuses (issue 33.9) ----------------------

def resolved(document: dict[str, Any], schema: Any) -> Any:
    if isinstance(schema, dict) and "$ref" in schema:
        return document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def strings(document: dict[str, Any], schema: Any, seen: frozenset[str] = frozenset()
            ) -> Iterator[dict[str, Any]]:
    """Every string schema in ``schema`` ($refs followed once), as a request body's
    validator would reach it."""
    if isinstance(schema, list):
        for item in schema:
            yield from strings(document, item, seen)
        return
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        if schema["$ref"] not in seen:
            yield from strings(document, resolved(document, schema), seen | {schema["$ref"]})
        return
    if schema.get("type") == "string":
        yield schema
    for key in ("anyOf", "allOf", "oneOf", "items"):
        yield from strings(document, schema.get(key), seen)
    for value in schema.get("properties", {}).values():
        yield from strings(document, value, seen)


async def test_no_text_field_promises_to_take_nul(document: dict[str, Any]) -> None:
    """The server refuses NUL in every text field (PostgreSQL cannot store it); the
    document said so for `text` alone."""
    checked = 0
    for key, operation in operations(document).items():
        schemas = [p["schema"] for p in operation["parameters"] if p["in"] == "query"]
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if body:
            schemas.append(body["schema"])
        for schema in strings(document, schemas):
            if "enum" in schema or "const" in schema or schema.get("format") == "date-time":
                continue
            assert "pattern" in schema, (key, schema)
            assert re.search(schema["pattern"], "a\x00b") is None, (key, schema)
            # a pattern that takes text at all: "a", or its own example (a cron's)
            assert re.search(schema["pattern"], schema.get("examples", ["a"])[0]), (key, schema)
            checked += 1
    assert checked > 100
    reclaim = request_schema(operations(document)[("post", "/v1/tasks/{task_id}/reclaim")])
    assert reclaim["properties"]["reason"]["pattern"] == r"^[^\x00]*$"


async def test_cancel_pause_and_resume_document_their_optional_body(
        document: dict[str, Any]) -> None:
    for action in ("cancel", "pause", "resume"):
        operation = operations(document)[("post", f"/v1/tasks/{{task_id}}/{action}")]
        body = operation["requestBody"]
        assert body["required"] is False
        given, none = body["content"]["application/json"]["schema"]["anyOf"]
        assert none == {"type": "null"}
        assert set(given["properties"]) == {"reason"} and given["additionalProperties"] is False
        assert {"400", "408", "413"} <= set(operation["responses"])
        assert "Content-Type" not in operation["responses"]["400"]["description"]


def nested(levels: int) -> dict[str, Any]:
    """Objects ``levels`` deep: ``nested(1)`` is ``{}``."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


async def test_the_nesting_limit_is_documented_and_kept(gateway: Gateway) -> None:
    document = await (await gateway.client.get("/openapi.json")).get_json()
    ops = operations(document)
    for key, field in ((("post", "/v1/tasks"), "params"), (("post", "/v1/queries"), "params"),
                       (("post", "/v1/tasks/{task_id}/result"), "result"),
                       (("post", "/v1/tasks/{task_id}/result"), "progress"),
                       (("post", "/v1/tasks/{task_id}/renew"), "progress"),
                       (("post", "/v1/queries/{query_id}/result"), "result")):
        text = request_schema(ops[key])["properties"][field]["description"]
        assert "nest at most 32 levels deep, this one counted (deeper: 400)" in text, key
    order = {"site": "shop", "kind": "k"}
    status, reply = await gateway.call("POST", "/v1/tasks", "t1",
                                       json={**order, "task_id": "d32", "params": nested(32)})
    assert status == 201, reply
    status, reply = await gateway.call("POST", "/v1/tasks", "t1",
                                       json={**order, "task_id": "d33", "params": nested(33)})
    assert (status, reply["error"]["message"]) == (400, "params is nested deeper than 32 "
                                                        "levels")


async def test_a_credit_goes_only_where_the_document_says(gateway: Gateway) -> None:
    """A system account (`@world`) matches no credit's account pattern, and is a 400;
    a tenant's account matches it, and is credited."""
    document = await (await gateway.client.get("/openapi.json")).get_json()
    credit = operations(document)[("post", "/v1/ledger/accounts/{account}/credit")]
    pattern = parameter(credit, "account")["pattern"]
    for account, matches, status in (("@world", False, 400), ("t1", True, 200)):
        assert bool(re.search(pattern, account)) is matches
        answer, reply = await gateway.call("POST", f"/v1/ledger/accounts/{account}/credit",
                                           "admin", json={"amount": 5, "ref": f"r-{account}"})
        assert answer == status, reply
