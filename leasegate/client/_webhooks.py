"""Completion webhooks as Standard Webhooks signs them (https://www.standardwebhooks.com):
check that a delivery came from your gateway before you trust it::

    from leasegate.client import WebhookVerificationError, verify_webhook

    def receive(headers, body: bytes):          # in your web framework's handler
        try:
            event = verify_webhook("whsec_...", headers, body)
        except WebhookVerificationError:
            return 400
        if event["type"] == "task.succeeded":
            ...                                  # event["data"] is the task object
        return 204

Written with the standard library (the SDK needs no dependency for it); its tests
check it against the ``standardwebhooks`` package. The gateway signs with
:func:`sign`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any, Final

TOLERANCE_SECONDS: Final = 300
"""How far a delivery's timestamp may be from now, either way (a replay's window)."""
SECRET_PREFIX: Final = "whsec_"


class WebhookVerificationError(ValueError):
    """A delivery that must not be trusted: a missing or bad signature, or a timestamp
    more than five minutes away from now."""


def _key(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except ValueError:
        raise WebhookVerificationError("the secret is not whsec_ and base64") from None


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,`` and the base64 HMAC-SHA256 of ``{msg_id}.{timestamp}.{body}``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()
                                    ).decode()


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes | str, *,
                   now: float | None = None) -> Any:
    """The delivery's JSON body (``{"type", "timestamp", "data"}``), once its
    ``webhook-signature`` holds a signature by ``secret`` of its ``webhook-id``,
    ``webhook-timestamp`` and ``body`` (the bytes as received), and its timestamp is
    within five minutes of ``now`` (default: the time now); else
    :class:`WebhookVerificationError`."""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        msg_id = lowered["webhook-id"]
        stamp = lowered["webhook-timestamp"]
        signatures = lowered["webhook-signature"]
    except KeyError as missing:
        raise WebhookVerificationError(f"missing header {missing.args[0]}") from None
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError(f"webhook-timestamp is not a number: {stamp!r:.40}"
                                       ) from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > TOLERANCE_SECONDS:
        raise WebhookVerificationError(
            f"webhook-timestamp {timestamp} is more than {TOLERANCE_SECONDS} s from now "
            f"({int(current)}): too old (a replay?) or the clocks disagree")
    expected = sign(secret, msg_id, timestamp, raw).encode()
    for candidate in signatures.split():
        if hmac.compare_digest(candidate.encode(), expected):
            try:
                return json.loads(raw)
            except ValueError:
                raise WebhookVerificationError("the body is not JSON") from None
    raise WebhookVerificationError("no signature in webhook-signature matches the secret")
