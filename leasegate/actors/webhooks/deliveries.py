"""Messages about deliveries, each followed by its handler: an endpoint's list and a
redelivery (a client of its tenant, or an admin), and what the deliverer asks (the
due ones, claimed; each attempt recorded), and the bound on pending deliveries.

A failed attempt is tried again after :data:`~leasegate.actors.webhooks.RETRY_DELAYS`
(each +- ``webhook_retry_jitter`` of itself, so that a gateway's backlog does not come
back in one burst); after the last one the delivery is failed. A redelivery asked for makes a
delivery pending and due now, whatever its state: one more attempt, then the schedule
from where its attempts stand. The deliverer waits on a :class:`Bell`, rung after each
commit that wrote deliveries."""

from __future__ import annotations

import random
from dataclasses import dataclass

import trio

from leasegate.actors.checks import check_flag, check_id, check_int, check_number, check_text
from leasegate.actors.runtime.mailbox import Ask
from leasegate.actors.webhooks import DISABLE_AFTER, Webhooks, retry_delay
from leasegate.actors.webhooks.endpoints import OfEndpoint, endpoint
from leasegate.actors.webhooks.turn import WEBHOOKS, WebhookTurn
from leasegate.actors.webhooks.views import Claimed, DeliveryView, delivery_view, due
from leasegate.clock import iso
from leasegate.errors import InvalidRequest, NotFound
from leasegate.storage import webhooks_sql as sql

MAX_CLAIM = 1000
MAX_LEASE = 86400.0
MAX_GATEWAY = 128  # the gateway setting's bound
# A delivery's body: the job object (its params and result, 64 KiB of JSON each by
# default, more if raised) and the envelope.
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class ListDeliveries(OfEndpoint[tuple[DeliveryView, ...]]):
    """The endpoint's last 100 deliveries, newest first."""


@WEBHOOKS.on(ListDeliveries)
def list_deliveries(turn: WebhookTurn, m: ListDeliveries) -> tuple[DeliveryView, ...]:
    endpoint(turn, m.endpoint_id, m.tenant)
    return tuple(delivery_view(row) for row in sql.page_deliveries(turn.conn, m.endpoint_id))


@dataclass(frozen=True)
class RetryDelivery(OfEndpoint[DeliveryView]):
    delivery_id: str = ""

    def check(self) -> None:
        super().check()
        check_id("delivery_id", self.delivery_id)


@WEBHOOKS.on(RetryDelivery)
def retry(turn: WebhookTurn, m: RetryDelivery) -> DeliveryView:
    endpoint(turn, m.endpoint_id, m.tenant)
    if not sql.due_again(turn.conn, m.endpoint_id, m.delivery_id, turn.now):
        raise NotFound(f"no delivery {m.delivery_id} of webhook endpoint {m.endpoint_id}")
    row = sql.get_delivery(turn.conn, m.endpoint_id, m.delivery_id)
    assert row is not None
    return delivery_view(row)


@dataclass(frozen=True)
class ClaimDue(Ask[Webhooks, Claimed]):
    """Up to ``limit`` due deliveries, now ``gateway``'s for ``lease`` seconds."""

    gateway: str
    limit: int
    lease: float

    def check(self) -> None:
        check_text("gateway", self.gateway, most=MAX_GATEWAY, empty=False)
        check_int("limit", self.limit, 1, MAX_CLAIM)
        check_number("lease", self.lease, 0.001, MAX_LEASE)


@WEBHOOKS.on(ClaimDue)
def claim(turn: WebhookTurn, m: ClaimDue) -> Claimed:
    rows = sql.claim_due(turn.conn, m.gateway, turn.now, m.limit, m.lease)
    return Claimed(tuple(due(row, turn.now) for row in rows), sql.next_due(turn.conn))


@dataclass(frozen=True)
class Attempt:
    """What one attempt of a claimed delivery found: ``delivered`` (a 2xx in time), or
    not, with the answer's status code, or the error of no answer."""

    delivery_id: str
    endpoint_id: str
    body: str  # as sent (kept, so that every attempt sends the same)
    delivered: bool
    status_code: int | None
    error: str | None
    response: str | None  # at most 1 KB of it

    def check(self) -> None:
        check_id("delivery_id", self.delivery_id)
        check_id("endpoint_id", self.endpoint_id)
        check_text("body", self.body, most=MAX_BODY)
        check_flag("delivered", self.delivered)
        check_int("status_code", self.status_code, 100, 999, optional=True)
        check_text("error", self.error, optional=True)
        check_text("response", self.response, optional=True)


@dataclass(frozen=True)
class RecordAttempts(Ask[Webhooks, int]):
    """The attempts of deliveries ``gateway`` claimed; how many were still its own."""

    gateway: str
    attempts: tuple[Attempt, ...]

    def check(self) -> None:
        check_text("gateway", self.gateway, most=MAX_GATEWAY, empty=False)
        if not isinstance(self.attempts, tuple) or len(self.attempts) > MAX_CLAIM or not all(
                isinstance(a, Attempt) for a in self.attempts):
            raise InvalidRequest(f"attempts must be at most {MAX_CLAIM} Attempts")
        for attempt in self.attempts:
            attempt.check()


@WEBHOOKS.on(RecordAttempts)
def record(turn: WebhookTurn, m: RecordAttempts) -> int:
    recorded = 0
    jitter = turn.settings.webhook_retry_jitter
    for a in m.attempts:
        row = sql.get_delivery(turn.conn, a.endpoint_id, a.delivery_id)
        if row is None or row["lease_owner"] != m.gateway:
            continue  # deleted, or redelivered meanwhile: that one is the live attempt
        delay = None if a.delivered else retry_delay(row["attempts"] + 1)
        status = "delivered" if a.delivered else "pending" if delay is not None else "failed"
        next_at = (None if delay is None
                   else turn.now + delay * (1 + random.uniform(-jitter, jitter)))
        recorded += sql.record_attempt(
            turn.conn, a.delivery_id, m.gateway, turn.now, body=a.body, status=status,
            next_attempt_at=next_at, status_code=a.status_code, error=a.error,
            response=a.response)
        if a.delivered:
            sql.endpoint_succeeded(turn.conn, a.endpoint_id)
        else:
            what = a.error or f"HTTP {a.status_code}"
            sql.endpoint_failed(turn.conn, a.endpoint_id, turn.now, DISABLE_AFTER,
                                f"every delivery failed for 24 hours; disabled at "
                                f"{iso(turn.now)} (last: {what})")
    return recorded


def bound_pending(turn: WebhookTurn, now: float) -> None:
    """Periodic: past ``webhook_max_pending`` pending deliveries of one endpoint, the
    oldest are failed unsent (what an endpoint that cannot keep up loses is the oldest
    news, and the gateway's disk stays bounded); finished deliveries past the last 100
    of each endpoint are deleted."""
    bound = turn.settings.webhook_max_pending
    turn.dropped += sql.drop_over_bound(
        turn.conn, bound, now, f"dropped unsent: the endpoint had more than {bound} "
                               "pending deliveries (webhook_max_pending)")
    sql.purge_finished(turn.conn)


class Bell:
    """A wake-up that is never missed: one rung while nobody waits is heard by the
    next :meth:`wait` (which returns at once and hears it only once)."""

    def __init__(self) -> None:
        self._rung = trio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self) -> None:
        await self._rung.wait()
        self._rung = trio.Event()
