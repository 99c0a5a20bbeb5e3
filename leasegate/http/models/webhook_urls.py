"""Where a webhook may be sent: https to a public address, unless
``webhook_allow_private`` (then http too, and loopback, private and link-local
addresses: tests, a lab).

Checked when an endpoint is created or its URL changed, and again before each attempt
(a name may resolve elsewhere by then). The check resolves the host itself; httpx
resolves it again to connect, so a name that changes its answer between the two could
slip past: an attacker who owns a DNS zone can aim one attempt, not read its answer
beyond the 1 KB the delivery keeps."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import trio

from leasegate.errors import InvalidRequest

RESOLVE_SECONDS = 5.0


RefusedUrl = InvalidRequest  # the URL's scheme or address is not one a webhook may go to


async def check_destination(url: str, allow_private: bool) -> None:
    """Raise :class:`RefusedUrl` unless ``url`` may receive webhooks now."""
    parts = urlsplit(url)
    if allow_private:
        return
    if parts.scheme != "https":
        raise RefusedUrl("a webhook url must be https:// (http:// only with the "
                         "webhook_allow_private setting)")
    host = parts.hostname or ""
    for address in await _addresses(host, parts.port or 443):
        if not address.is_global or address.is_multicast:
            raise RefusedUrl(f"{host} resolves to {address}, a loopback, private, "
                             "link-local or reserved address: refused (the "
                             "webhook_allow_private setting allows it)")


async def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    with trio.move_on_after(RESOLVE_SECONDS):
        try:
            found = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
        except OSError as exc:
            raise RefusedUrl(f"{host} does not resolve: {exc}") from None
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
    raise RefusedUrl(f"{host} did not resolve within {RESOLVE_SECONDS:g} s")
