"""What leasegate uses of its frameworks below their documented surface: one test per
reach-in, each checking by name the private parts it relies on in the installed release.

Each reach-in stays because a correctness behaviour needs it (issue 35; the table in
docs/design-notes.md gives what each measured, and the tests that show the behaviour),
and pyproject.toml pins its package to the release tested here. A release that changes
a part fails here, naming the package, its version, the part and our module, rather
than somewhere in a served test. The reach-ins:

* ``http/server/expect.py`` (hypercorn, h11): the HTTP/1.1 protocol, replaced for
  ``ProtocolWrapper``, holds ``100 Continue`` back until the request's checks pass and
  bounds pipelining (test_early_answers.py, test_hostile_callers.py);
* ``http/server/listener.py`` and ``server.py`` (hypercorn): the trio worker
  re-assembled with our accept loop: bounds per address and in all, quiet EMFILE, a
  reset connection cancels what it pipelined (test_bounds.py, test_hostile_callers.py);
* ``http/openapi/document.py`` (quart-schema): the attributes its decorators set on a
  view, read to document each route's 400/408/413 (test_openapi.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from importlib import metadata
from typing import Any

import h11
import hypercorn.protocol
import hypercorn.utils
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
                    f"keep {package} at the release pyproject.toml pins", pytrace=False)


def parameters(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_expect_replaces_hypercorns_h11_protocol() -> None:
    """leasegate/http/server/expect.py: hypercorn builds its HTTP/1.1 protocol by the
    name ``hypercorn.protocol.H11Protocol``, which ours replaces; ours overrides
    ``_send_h11_event`` (the 100), ``stream_send`` and ``handle`` (the pipelining
    bound), and reads ``connection`` (h11's, with ``trailing_data`` and the 100 it
    waits for), ``stream`` (an ``HTTPStream`` with its ``scope``) and ``send``."""
    where = "leasegate/http/server/expect.py"
    need(getattr(hypercorn.protocol, "H11Protocol", None) is not None, "hypercorn",
         "hypercorn.protocol.H11Protocol", where, "is gone")
    need("H11Protocol" in hypercorn.protocol.ProtocolWrapper.__init__.__code__.co_names,
         "hypercorn", "ProtocolWrapper.__init__ -> H11Protocol", where,
         "no longer looks the protocol class up in hypercorn.protocol")
    send_event = getattr(H11Protocol, "_send_h11_event", None)
    need(send_event is not None and inspect.iscoroutinefunction(send_event)
         and parameters(send_event) == ["self", "event"], "hypercorn",
         "H11Protocol._send_h11_event(self, event)", where, "is gone or changed")
    need("InformationalResponse" in inspect.getsource(H11Protocol._handle_events),
         "hypercorn", "H11Protocol._handle_events sending the 100 by _send_h11_event",
         where, "changed")
    for method in ("stream_send", "handle"):
        need(parameters(getattr(H11Protocol, method)) == ["self", "event"], "hypercorn",
             f"H11Protocol.{method}(self, event)", where, "changed")
    need("RawData" in inspect.getsource(H11Protocol.handle), "hypercorn",
         "H11Protocol.handle(RawData)", where, "no longer takes each read from the socket")
    need([f.name for f in dataclasses.fields(Response)] == ["stream_id", "headers",
                                                            "status_code"],
         "hypercorn", "hypercorn.protocol.events.Response(stream_id, headers, status_code)",
         where, "changed")

    async def send(event: object) -> None:
        pass

    protocol = H11Protocol(None, Config(), WorkerContext(None), None, {}, False,  # type: ignore[arg-type]
                           None, None, send)
    connection = protocol.connection
    need(isinstance(connection, h11.Connection)
         and isinstance(connection.trailing_data, tuple)
         and connection.they_are_waiting_for_100_continue is False, "hypercorn",
         "H11Protocol.connection (an h11.Connection: trailing_data, "
         "they_are_waiting_for_100_continue)", where, "is gone")
    need(protocol.stream is None and protocol.send is send, "hypercorn",
         "H11Protocol.stream / H11Protocol.send", where, "are gone")
    need("scope" in inspect.getsource(HTTPStream.handle), "hypercorn", "HTTPStream.scope",
         where, "is no longer set by HTTPStream.handle")
    original = hypercorn.protocol.H11Protocol  # type: ignore[attr-defined]
    try:
        expect.install(Settings())
        installed = hypercorn.protocol.H11Protocol  # type: ignore[attr-defined]
        need(issubclass(installed, H11Protocol) and installed is not H11Protocol,
             "hypercorn", "hypercorn.protocol.H11Protocol", where, "could not be replaced")
    finally:
        hypercorn.protocol.H11Protocol = original  # type: ignore[attr-defined]


def test_listener_reassembles_hypercorns_trio_worker() -> None:
    """leasegate/http/server/listener.py and leasegate/server.py: hypercorn's trio worker
    (``hypercorn.trio.run.worker_serve``) rebuilt from its parts (``TCPServer``,
    ``WorkerContext``, ``Lifespan``, ``StatsdLogger``, ``wrap_app``) with our accept
    loop; ``TCPServer`` takes our ``ClientStream``: a stream without ``do_handshake``
    is plain TCP, of which it reads ``socket`` beside the stream methods, and it takes
    ``ClosedResourceError``/``BrokenResourceError`` of a send as the client gone."""
    where = "leasegate/http/server/listener.py"
    need(parameters(TCPServer.__init__) == ["self", "app", "config", "context", "state",
                                             "stream"],
         "hypercorn", "hypercorn.trio.tcp_server.TCPServer(app, config, context, state, "
         "stream)", where, "changed")
    need(parameters(WorkerContext.__init__) == ["self", "max_requests"], "hypercorn",
         "hypercorn.trio.worker_context.WorkerContext(max_requests)", where, "changed")
    need(inspect.iscoroutinefunction(getattr(WorkerContext(None).terminated, "set", None)),
         "hypercorn", "WorkerContext.terminated.set()", where, "is no longer awaitable")
    need(parameters(Lifespan.__init__) == ["self", "app", "config", "state"], "hypercorn",
         "hypercorn.trio.lifespan.Lifespan(app, config, state)", where, "changed")
    for method in ("handle_lifespan", "wait_for_startup", "wait_for_shutdown"):
        need(inspect.iscoroutinefunction(getattr(Lifespan, method, None)), "hypercorn",
             f"Lifespan.{method}", where, "is gone")
    need(hasattr(Config, "set_statsd_logger_class"), "hypercorn",
         "Config.set_statsd_logger_class", where, "is gone")
    need(parameters(hypercorn.utils.wrap_app) == ["app", "wsgi_max_body_size", "mode"],
         "hypercorn", "hypercorn.utils.wrap_app(app, wsgi_max_body_size, mode)",
         "leasegate/server.py", "changed")
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


class Body(BaseModel):
    n: int


def test_document_reads_quart_schemas_view_attributes() -> None:
    """leasegate/http/openapi/document.py: which views take a JSON body or a query
    string, by the attributes quart-schema's decorators set on them."""
    where = "leasegate/http/openapi/document.py"

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
