"""What leasegate uses of its frameworks below their documented surface, each checked
by name against the installed release.

Where no public hook does the job, the code reaches inside (and pyproject.toml bounds
the package at its next minor release). Each test here names the private name, the
package and version, and the code of ours that relies on it, so that a release that
changes it fails here, saying what to look at, rather than somewhere in a served test.

Today's uses:

* ``http/server/expect.py``: hypercorn's ``H11Protocol`` (``hypercorn.protocol.H11Protocol``,
  replaced for ``ProtocolWrapper``), its ``_send_h11_event``, ``stream_send``,
  ``connection``, ``stream`` (an ``HTTPStream`` with its ``scope``) and ``send``;
  h11's events and states;
* ``http/server/expect.py`` also: ``H11Protocol.handle`` (a read from the socket) and
  hypercorn's ``Response`` event, rebuilt with ``Connection: close`` past the
  pipelining bound;
* ``http/server/listener.py``: hypercorn's trio worker parts (``TCPServer``,
  ``WorkerContext``, ``Lifespan``, ``StatsdLogger``), as ``hypercorn.trio.run``
  assembles them; ``TCPServer`` taking a stream without ``do_handshake`` for plain
  TCP and reading only ``socket`` of it beside the stream methods (``ClientStream``),
  and catching ``ClosedResourceError``/``BrokenResourceError`` of its sends;
* ``http/openapi/document.py``: the attributes quart-schema's decorators set on a view
  and its OpenAPI reads;
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from importlib import metadata
from typing import Any

import h11
import hypercorn.protocol
import pytest
import quart_schema.validation
from hypercorn.config import Config
from hypercorn.protocol.events import Response
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from pydantic import BaseModel

from leasegate.http.server import expect
from leasegate.settings import Settings


def need(ok: bool, package: str, name: str, where: str, what: str) -> None:
    """Fail, naming the private ``name`` of ``package`` (and its installed version)."""
    if not ok:
        pytest.fail(f"{package} {metadata.version(package)}: {name} {what}; {where} relies "
                    f"on it (see tests/test_framework_internals.py): adapt that code, or "
                    f"keep {package} below this release in pyproject.toml", pytrace=False)


def parameters(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


# ---- hypercorn and h11: http/server/expect.py ------------------------------------------------


def test_hypercorn_builds_its_http1_protocol_by_the_name_expect_replaces() -> None:
    need(getattr(hypercorn.protocol, "H11Protocol", None) is not None, "hypercorn",
         "hypercorn.protocol.H11Protocol", "http/server/expect.py", "is gone")
    need("H11Protocol" in hypercorn.protocol.ProtocolWrapper.__init__.__code__.co_names,
         "hypercorn", "ProtocolWrapper.__init__ -> H11Protocol", "http/server/expect.py",
         "no longer looks the protocol class up in hypercorn.protocol")


def test_the_h11_protocol_members_expect_overrides_and_reads() -> None:
    where = "http/server/expect.py"
    send_event = getattr(H11Protocol, "_send_h11_event", None)
    need(send_event is not None and inspect.iscoroutinefunction(send_event)
         and parameters(send_event) == ["self", "event"], "hypercorn",
         "H11Protocol._send_h11_event(self, event)", where, "is gone or changed")
    need(parameters(H11Protocol.stream_send) == ["self", "event"], "hypercorn",
         "H11Protocol.stream_send(self, event)", where, "changed")

    async def send(event: object) -> None:
        pass

    protocol = H11Protocol(None, Config(), WorkerContext(None), None, {}, False,  # type: ignore[arg-type]
                           None, None, send)
    need(isinstance(protocol.connection, h11.Connection), "hypercorn",
         "H11Protocol.connection (an h11.Connection)", where, "is gone")
    need(protocol.stream is None and protocol.send is send, "hypercorn",
         "H11Protocol.stream / H11Protocol.send", where, "are gone")
    need("scope" in inspect.getsource(HTTPStream.handle), "hypercorn", "HTTPStream.scope",
         where, "is no longer set by HTTPStream.handle")


def test_the_h11_protocol_members_the_pipelining_bound_relies_on() -> None:
    where = "http/server/expect.py (MAX_QUEUED)"
    need(parameters(H11Protocol.handle) == ["self", "event"], "hypercorn",
         "H11Protocol.handle(self, event)", where, "changed")
    need("RawData" in inspect.getsource(H11Protocol.handle), "hypercorn",
         "H11Protocol.handle(RawData)", where, "no longer takes each read from the socket")
    need([f.name for f in dataclasses.fields(Response)] == ["stream_id", "headers",
                                                            "status_code"],
         "hypercorn", "hypercorn.protocol.events.Response(stream_id, headers, status_code)",
         where, "changed")
    need(isinstance(h11.Connection(h11.SERVER).trailing_data, tuple), "h11",
         "h11.Connection.trailing_data", where, "is gone")


def test_the_h11_names_expect_uses() -> None:
    for name in ("InformationalResponse", "Response", "LocalProtocolError", "ERROR"):
        need(hasattr(h11, name), "h11", f"h11.{name}", "http/server/expect.py", "is gone")
    need(parameters(h11.Connection.send) == ["self", "event"], "h11",
         "h11.Connection.send(self, event)", "http/server/expect.py", "changed")


def test_expect_installs_its_protocol_for_hypercorn() -> None:
    original = hypercorn.protocol.H11Protocol  # type: ignore[attr-defined]
    try:
        expect.install(Settings())
        installed = hypercorn.protocol.H11Protocol  # type: ignore[attr-defined]
        assert issubclass(installed, H11Protocol) and installed is not H11Protocol
    finally:
        hypercorn.protocol.H11Protocol = original  # type: ignore[attr-defined]


# ---- hypercorn: http/server/listener.py --------------------------------------------------------


def test_the_trio_worker_parts_the_listener_assembles() -> None:
    where = "http/server/listener.py"
    need(parameters(TCPServer.__init__) == ["self", "app", "config", "context", "state",
                                             "stream"],
         "hypercorn", "hypercorn.trio.tcp_server.TCPServer(app, config, context, state, "
         "stream)", where, "changed")
    need(parameters(WorkerContext.__init__) == ["self", "max_requests"], "hypercorn",
         "hypercorn.trio.worker_context.WorkerContext(max_requests)", where, "changed")
    context = WorkerContext(None)
    need(inspect.iscoroutinefunction(getattr(context.terminated, "set", None)), "hypercorn",
         "WorkerContext.terminated.set()", where, "is no longer awaitable")
    need(parameters(Lifespan.__init__) == ["self", "app", "config", "state"], "hypercorn",
         "hypercorn.trio.lifespan.Lifespan(app, config, state)", where, "changed")
    for method in ("handle_lifespan", "wait_for_startup", "wait_for_shutdown"):
        need(inspect.iscoroutinefunction(getattr(Lifespan, method, None)), "hypercorn",
             f"Lifespan.{method}", where, "is gone")
    need(hasattr(Config, "set_statsd_logger_class"), "hypercorn",
         "Config.set_statsd_logger_class", where, "is gone")


def test_the_tcp_server_takes_the_client_stream_for_plain_tcp() -> None:
    where = "http/server/listener.py (ClientStream)"
    run, send = inspect.getsource(TCPServer.run), inspect.getsource(TCPServer.protocol_send)
    need("do_handshake" in run and "except AttributeError" in run
         and "self.stream.socket" in run, "hypercorn", "TCPServer.run", where,
         "no longer tells plain TCP by a stream without do_handshake, or no longer reads "
         "its socket")
    need("ClosedResourceError" in send and "BrokenResourceError" in send, "hypercorn",
         "TCPServer.protocol_send", where,
         "no longer takes ClosedResourceError/BrokenResourceError of a send as gone")
    used = {"send_all", "send_eof", "receive_some", "aclose", "do_handshake", "socket",
            "transport_stream", "selected_alpn_protocol"}
    source = inspect.getsource(TCPServer)
    for name in sorted(set(re.findall(r"self\.stream\.(\w+)", source)) - used):
        need(False, "hypercorn", f"TCPServer's self.stream.{name}", where,
             "is new: ClientStream does not have it")


# ---- quart-schema: http/openapi/document.py --------------


class Body(BaseModel):
    n: int


def test_the_attributes_quart_schema_documents_a_view_by() -> None:
    where = "http/openapi/document.py"

    async def view(data: Body) -> None:
        pass

    async def listing(query_args: Body) -> None:
        pass

    documented = quart_schema.validate_request(Body)(view)
    need(getattr(documented, quart_schema.validation.QUART_SCHEMA_REQUEST_ATTRIBUTE, None)
         == (Body, quart_schema.validation.DataSource.JSON), "quart-schema",
         "QUART_SCHEMA_REQUEST_ATTRIBUTE = (model, DataSource.JSON)", where,
         "is not what validate_request sets")
    listed = quart_schema.validate_querystring(Body)(listing)
    need(getattr(listed, quart_schema.validation.QUART_SCHEMA_QUERYSTRING_ATTRIBUTE, None)
         is Body, "quart-schema", "QUART_SCHEMA_QUERYSTRING_ATTRIBUTE = model", where,
         "is not what validate_querystring sets")
