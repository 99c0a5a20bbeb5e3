"""What a first-time user and a plain HTTP client meet at the edges, against the served
gateway: ``/docs`` with no network, messages that say what is wrong, ``/health`` that
never refuses, and a concrete path that is only itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser

import httpx
import pytest

from tests import served

DEEP = b"[" * 5000 + b"]" * 5000


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[served.Served]:
    with served.serving(tmp_path_factory.mktemp("contract")) as gateway:
        yield gateway


def message(response: httpx.Response) -> str:
    text: str = response.json()["error"]["message"]
    return text


class Links(HTMLParser):
    """Every URL a page makes the browser load (scripts, styles, images, frames)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.urls.append(value)


def test_docs_load_nothing_from_elsewhere(gateway: served.Served) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        page = client.get("/docs")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        links = Links()
        links.feed(page.text)
        assert len(links.urls) == 2, links.urls  # Swagger UI's script and style sheet
        assert all(url.startswith("/") and not url.startswith("//") for url in links.urls)
        # The page's own script points at our document and at no online validator.
        assert re.findall(r'url: "([^"]*)"', page.text) == ["/openapi.json"]
        assert "validatorUrl: null" in page.text
        assert "http://" not in page.text and "https://" not in page.text

        kinds = {".js": "text/javascript", ".css": "text/css"}
        for url in links.urls:
            asset = client.get(url)
            assert asset.status_code == 200, url
            assert asset.headers["content-type"].startswith(kinds[url[url.rindex("."):]])
            assert len(asset.content) > 10_000  # the real file, not an error page
        css = client.get(next(url for url in links.urls if url.endswith(".css"))).text
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css)  # no remote fonts or images
        assert "SwaggerUIBundle" in client.get(
            next(url for url in links.urls if url.endswith(".js"))).text

        # Only the files the page needs are served, and no page loads from a CDN.
        assert client.get("/docs/static/index.html").status_code == 404
        assert client.get("/docs/static/..%2Fpyproject.toml").status_code == 404
        for cdn_page in ("/redocs", "/scalar"):
            assert client.get(cdn_page).status_code == 404


def test_messages_say_what_is_wrong(gateway: served.Served) -> None:
    with gateway.client("client") as client:
        no_type = client.post("/v1/tasks", content=b'{"site": "shop", "kind": "k"}')
        assert no_type.status_code == 400
        assert "Content-Type: application/json" in message(no_type)
        assert "got no Content-Type" in message(no_type)
        text = client.post("/v1/tasks", content=b'{"site": "shop", "kind": "k"}',
                           headers={"Content-Type": "text/plain"})
        assert text.status_code == 400 and "'text/plain'" in message(text)

        # A bad query value is not blamed on the content type of a body never sent.
        bad_wait = client.get("/v1/tasks/t-1?wait_seconds=99")
        assert bad_wait.status_code == 400
        assert "wait_seconds" in message(bad_wait) and "Content-Type" not in message(bad_wait)

        json_headers = {"Content-Type": "application/json"}
        broken = client.post("/v1/tasks", content=b'{"site": ', headers=json_headers)
        assert broken.status_code == 400
        assert message(broken).startswith("the body is not valid JSON: Expecting value")

        deep = client.post("/v1/tasks", content=DEEP, headers=json_headers)
        assert deep.status_code == 400 and "nested too deeply" in message(deep)
        deep_field = client.post("/v1/tasks", headers=json_headers,
                                 content=b'{"site": "s", "kind": "k", "params": {"a": '
                                         + b"[" * 40 + b"]" * 40 + b"}}")
        assert deep_field.status_code == 400
        assert message(deep_field) == "params is nested deeper than 32 levels"

        big = client.post("/v1/tasks", content=b"x" * (1024 * 1024 + 1), headers=json_headers)
        assert big.status_code == 413
        assert "1048576 bytes" in message(big)


def test_health_needs_no_key_and_refuses_none(gateway: served.Served) -> None:
    for header in ("Bearer lg_nope_nope", "Bearer not-a-key", "Basic abc", "Bearer"):
        response = httpx.get(f"{gateway.url}/health", headers={"Authorization": header})
        assert response.status_code == 200, (header, response.text)
        assert response.json()["status"] in ("ok", "degraded")


def test_a_concrete_path_is_only_itself(gateway: served.Served) -> None:
    """``/v1/tasks/lease`` is the lease route as ``/openapi.json`` says, not a task id."""
    with gateway.client("client") as client:
        for channel in ("tasks", "queries"):
            for method in ("GET", "OPTIONS", "DELETE"):
                response = client.request(method, f"/v1/{channel}/lease")
                assert response.status_code == 405, (method, channel)
                assert response.headers["Allow"] == "POST"
        # The templated route still reads ids (and says which methods it has).
        assert client.get("/v1/tasks/t-9").status_code == 404
        allow = client.options("/v1/tasks/t-9").headers["Allow"]
        assert set(allow.split(", ")) == {"GET", "HEAD"}
