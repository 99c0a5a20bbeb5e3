"""The SDK's request layer, made cheaper: the same bytes, URLs, errors and cookies as
httpx's own ``json=``, URL merging and cookie jar."""

from __future__ import annotations

import enum
import json
import math
import ssl
import uuid
from typing import Any

import httpx
import pytest

from leasegate.client import Client
from leasegate.client._http import Retry, _Urls, _verify, encode_json, path
from leasegate.client._sync.http import SyncHTTP


class Colour(enum.Enum):
    RED = "red"


def _stdlib(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode()


@pytest.mark.parametrize("body", [
    {"site": "s", "params": {"n": 1, "x": [1.5, None, True, "é"], "t": (1, 2)}},
    {"deep": [[[{"a": -(2**63)}]]], "big": 2**63 - 1, "tiny": 1e-300},
    {}, [], "text", 0, None,
])
def test_plain_bodies_encode_to_the_same_values(body: Any) -> None:
    assert json.loads(encode_json(body)) == json.loads(_stdlib(body))


@pytest.mark.parametrize("body", [
    {1: "int key"}, {"n": 2**64}, {"f": math.nan}, {"f": math.inf},
    {"e": Colour.RED}, {"u": uuid.UUID(int=1)}, {"s": {1, 2}},
])
def test_other_bodies_go_through_the_stdlib(body: Any) -> None:
    try:
        expected: bytes | type[Exception] = _stdlib(body)
    except (TypeError, ValueError) as error:
        expected = type(error)
    if isinstance(expected, bytes):
        assert encode_json(body) == expected
    else:
        with pytest.raises(expected):
            encode_json(body)


@pytest.mark.parametrize("base", ["http://gw.test", "http://gw.test/prefix",
                                  "http://gw.test/prefix/"])
@pytest.mark.parametrize("url", [path("tasks"), path("tasks", "lease"),
                                 path("tasks", "id:1@x", "result"), path("queries", "a b/c"),
                                 "/v1/odd path?x=1"])
def test_urls_merge_as_httpx_does(base: str, url: str) -> None:
    client = httpx.Client(base_url=base)
    urls = _Urls(client.base_url)
    for _ in range(2):  # made, then cached (or merged as httpx merges: not a path() path)
        assert (str(client.build_request("GET", urls(url)).url)
                == str(client.build_request("GET", url).url))


def test_http_gateways_load_no_ca_bundle_and_verify_anything_else() -> None:
    context = _verify("http://gw.test", None)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert _verify("https://gw.test", None) is True
    assert _verify("http://gw.test", httpx.MockTransport(lambda r: httpx.Response(200))) is True


def test_cookies_the_gateway_sets_are_still_sent_back() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(200, json={}, headers={"set-cookie": "lb=node2; Path=/"})

    http = SyncHTTP("http://gw.test", "k", timeout=1, transport=httpx.MockTransport(answer),
                    retry=Retry(attempts=1))
    http.call("POST", path("tasks"), json={"a": 1})
    http.call("GET", path("tasks", "t1"))
    assert seen == [None, "lb=node2"]


def test_a_submit_sends_json_with_its_content_type() -> None:
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"query_id": "q", "status": "queued",
                                         "created": True})

    with Client("http://gw.test", "k", transport=httpx.MockTransport(answer)) as client:
        client.submit_query("s", "k", {"n": 1}, query_id="q")
    (request,) = requests
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"query_id": "q", "site": "s", "kind": "k",
                                           "params": {"n": 1}}
    assert str(request.url) == "http://gw.test/v1/queries"
