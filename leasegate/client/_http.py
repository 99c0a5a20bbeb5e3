"""The private request layer's parts without I/O (the calls: ``_async/http.py``).

Every call the SDK makes is safe to repeat (submits carry their id, leases a
``request_id``, start/renew/result the lease token), so a transport error, a
5xx or a 429 is retried with the same request, after an exponential, capped,
jittered pause. Anything else is an answer and is raised as it is.
"""

from __future__ import annotations

import json as jsonlib
import logging
import random
import re
import secrets
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any, Final
from urllib.parse import quote

import httpx
import orjson

from leasegate.client._errors import (
    LeasegateError,
    RateLimited,
    TransportError,
    error_from_response,
)

log = logging.getLogger("leasegate.client")

USER_AGENT: Final = "leasegate-python/0.1"
DEFAULT_TIMEOUT: Final = 10.0
Params = Mapping[str, str | int | float]


@dataclass(frozen=True, slots=True)
class Retry:
    """How a request that may not have arrived is retried.

    ``attempts`` is the number of tries in all (1: no retry). The pause after
    the n-th failure is ``backoff * 2**(n-1)`` capped at ``max_backoff``, of
    which a random 50-100 % is taken, and at least a 429's ``Retry-After``.

    ``attempts`` bounds every :class:`Client` and :class:`AsyncClient` call, a
    worker's ``run_once`` lease call and its start of a task. The rest use the
    same pauses but not ``attempts``: ``run()`` leases for ever, a result is
    sent until the gateway answers it, the "not executed" report of an
    unconfirmed start is offered ``UNCONFIRMED_START_REPORTS`` times, and a
    renewal is sent once, its own loop renewing again after the pause (or
    the 429's ``Retry-After``) until the handler returns or the lease is lost.
    """

    attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        """The pause before the next try, after ``failures`` failed tries."""
        step = min(self.max_backoff, self.backoff * 2.0 ** min(failures - 1, 30))
        pause = step * (0.5 + random.random() / 2)
        return max(pause, retry_after) if retry_after is not None else pause


def new_id() -> str:
    """A client-side id: 96 random bits, so a retry can replay the same submit."""
    return secrets.token_hex(12)


def path(*parts: str) -> str:
    """``path("tasks", task_id, "start")``: ``/v1/tasks/{task_id}/start``, each part
    percent-encoded (the id characters ``:`` and ``@`` are kept as they are)."""
    return "/v1/" + "/".join(quote(part, safe=":@") for part in parts)


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "User-Agent": USER_AGENT}


JSON_HEADERS: Final = {"Content-Type": "application/json"}
_PLAIN_SCALARS: Final = (str, bool, type(None))
_INT64: Final = 2**63


def _plain(value: Any) -> bool:
    """``value`` is made of plain JSON only (dict with str keys, list, tuple, str, int of
    64 bits, finite float, bool, None: exact types, no subclasses), so that orjson
    writes what the stdlib would (the same values) and refuses nothing it takes."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is int:
            if not -_INT64 <= item < _INT64:
                return False
        elif kind is float:
            if item != item or item in (float("inf"), float("-inf")):
                return False
        elif kind not in _PLAIN_SCALARS:
            return False
    return True


def encode_json(body: Any) -> bytes:
    """A request body as httpx's ``json=`` would send it (UTF-8, compact, NaN refused),
    written by orjson when the body is plain JSON (several times faster); anything
    else (a subclass, NaN, a key not a str, ...) goes through the stdlib exactly as
    httpx did, with the same errors."""
    if _plain(body):
        return orjson.dumps(body)
    return jsonlib.dumps(body, ensure_ascii=False, separators=(",", ":"),
                         allow_nan=False).encode("utf-8")


# Each digit as "0": 19 of them in a row may be an integer past 64 bits, which orjson
# reads as a float (a payload's 123456789012345678901234567890 as 1.2345678901234568e+29).
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG = b"0" * 19


def _may_hold_long_integers(content: bytes) -> bool:
    return _LONG in content.translate(_DIGITS)


def _integer(literal: str) -> int | Decimal:
    try:
        return int(literal)
    except ValueError:  # past sys.get_int_max_str_digits() (4,300): exact all the same
        return Decimal(literal)


def decode(response: httpx.Response) -> Any:
    """A reply's JSON; an error reply raised as its :class:`LeasegateError`."""
    if response.status_code >= 400:
        raise error_from_response(response)
    content = response.content
    try:
        if not _may_hold_long_integers(content):
            return orjson.loads(content)  # strict JSON; anything else: the stdlib's say
    except orjson.JSONDecodeError:
        pass
    try:
        return response.json(parse_int=_integer)  # integers exact (orjson: floats)
    except ValueError:
        raise LeasegateError(
            response.status_code, 0, "invalid_response", "the reply is not JSON"
        ) from None


# The last Date header read and its time: it changes once a second, and a worker
# reads one per reply (parsing it with email.utils costs more than the rest of the
# reply's handling by the SDK).
_last_date: tuple[str, float | None] = ("", None)


def server_time(response: httpx.Response) -> float | None:
    """The gateway's clock when it answered (the ``Date`` header, seconds since the
    epoch), or None if the reply has no readable ``Date``."""
    global _last_date
    value = response.headers.get("Date")
    if not value:
        return None
    last = _last_date  # one read: another thread may replace it meanwhile
    if last[0] == value:
        return last[1]
    moment_s = _parse_date(value)
    _last_date = (value, moment_s)
    return moment_s


def _parse_date(value: str) -> float | None:
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC, by RFC 5322
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class _Cookies(httpx.Cookies):
    """httpx's cookie jar, which skips the reading of a reply without cookies: httpx
    builds urllib's request and response adapters for every reply (about a third of
    a small call's CPU) only for the jar to find no ``Set-Cookie`` in them."""

    def extract_cookies(self, response: httpx.Response) -> None:
        headers = response.headers
        if "set-cookie" in headers or "set-cookie2" in headers:
            super().extract_cookies(response)


_NO_TLS: ssl.SSLContext | None = None


def _verify(base_url: str, transport: object) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for a client of ``base_url``: for an ``http://`` gateway (and
    httpx's own transport), a context that trusts no certificate, made once: httpx
    would otherwise load the CA bundle for every client (tens of ms of a process's
    start) for a TLS it never uses; were a request ever to reach an https URL, it
    would fail verification, never pass unverified. Otherwise httpx's default."""
    global _NO_TLS
    if transport is not None or not base_url.lower().startswith("http://"):
        return True
    if _NO_TLS is None:
        _NO_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with no CA loaded
    return _NO_TLS


# What path() makes: percent-encoded, so httpx would take it as it is.
_SIMPLE_PATH: Final = re.compile(r"/[A-Za-z0-9\-._~%:@/]*")
_MAX_CACHED_URLS: Final = 256


def gateways(base_url: str | Sequence[str]) -> list[str]:
    """The gateways' base URLs, in the order they are tried: one URL, or several
    gateways of one database (any of them serves every call)."""
    bases = [base_url] if isinstance(base_url, str) else list(base_url)
    if not bases or not all(isinstance(base, str) and base for base in bases):
        raise ValueError(f"base_url must be a URL or a list of URLs, got {base_url!r}")
    return bases


def client_options(bases: Sequence[str], key: str, timeout: float,
                   transport: object) -> dict[str, Any]:
    """The keywords of the httpx client (sync or async) of the gateways at ``bases``."""
    # One client serves every gateway: httpx's verifying default if any is not plain http.
    verifies = [_verify(base, transport) for base in bases]
    verify = True if True in verifies else verifies[0]
    return {"base_url": bases[0], "headers": _headers(key), "timeout": timeout,
            "transport": transport, "verify": verify}


def tuned(client: httpx.Client | httpx.AsyncClient, bases: Sequence[str]) -> list[_Urls]:
    """Give ``client`` the cookie jar that skips replies without cookies (when it has
    httpx's own jar), and return a maker of absolute URLs for each gateway."""
    if isinstance(getattr(client, "_cookies", None), httpx.Cookies):  # httpx's own
        client._cookies = _Cookies(client.cookies.jar)
    return [_Urls(httpx.URL(base)) for base in bases]


class _Urls:
    """The absolute URL of a request path on one gateway, as httpx would merge it with
    a client's base URL (``Client._merge_url``), without its two URL parses per
    request: the fixed paths (submit, lease, batches) are made once, a path with an id
    parsed once."""

    def __init__(self, base: httpx.URL) -> None:
        if not base.raw_path.endswith(b"/"):  # as httpx keeps a base URL
            base = base.copy_with(raw_path=base.raw_path + b"/")
        self.base = base
        self.cache: dict[str, httpx.URL] = {}

    def __call__(self, url: str) -> httpx.URL:
        found = self.cache.get(url)
        if found is not None:
            return found
        if not _SIMPLE_PATH.fullmatch(url):  # merged as httpx merges it
            relative = httpx.URL(url)
            if not relative.is_relative_url:
                return relative
            return self.base.copy_with(raw_path=self.base.raw_path
                                       + relative.raw_path.lstrip(b"/"))
        merged = self.base.copy_with(raw_path=self.base.raw_path + url[1:].encode("ascii"))
        if url.count("/") <= 3 and len(self.cache) < _MAX_CACHED_URLS:  # no per-job ids
            self.cache[url] = merged
        return merged


def gateway_failed(error: Exception) -> bool:
    """A failure of the gateway rather than an answer about the request: the next try
    goes to another gateway, when there are several."""
    if isinstance(error, httpx.TransportError):
        return True
    return isinstance(error, LeasegateError) and error.status in (502, 503, 504)


def retryable(error: LeasegateError) -> bool:
    """An error answer that is retried (a 5xx or a 429): the request may yet be taken."""
    return error.status >= 500 or isinstance(error, RateLimited)


def next_delay(error: Exception, failures: int, retry: Retry, *, forever: bool, what: str) -> float:
    """The pause before retrying after ``error``; raises the final error instead
    when it is an answer (not retryable) or the tries are used up."""
    retry_after = None
    if isinstance(error, LeasegateError):
        error.attempts = failures
        if not retryable(error):
            raise error
        retry_after = error.retry_after
    if not forever and failures >= retry.attempts:
        if isinstance(error, httpx.TransportError):
            raise TransportError(f"{what}: {error!r}", failures) from error
        raise error
    delay = retry.delay(failures, retry_after)
    log.warning("%s failed (%r), try %d; retrying in %.1fs", what, error, failures, delay)
    return delay
