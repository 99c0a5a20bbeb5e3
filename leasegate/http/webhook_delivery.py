"""The deliverer: this gateway's sender of webhook deliveries (a service of the system,
beside the actors, counted in /health and /metrics as ``webhooks.deliver``).

Each round it asks the webhooks actor for the due deliveries (up to
``webhook_max_in_flight``, each claimed for this gateway past the attempt's timeout),
sends them all at once, and records every attempt in one message. Between rounds it
sleeps until the next delivery is due, or until the bell rings (a commit wrote new
deliveries, a redelivery was asked for); on PostgreSQL it also looks every
``deadline_poll_interval`` (other gateways' jobs end too). A gateway that dies
mid-round leaves its claims to lapse: due again, for any gateway (at least once).

A delivery's body is fixed at its first attempt: the job object as ``GET
/v1/tasks/{id}`` answers it then (so with its billing once settled), and every later
attempt sends the same bytes. A job already purged by then is sent as its id and the
status of its event.
"""

from __future__ import annotations

import functools
import math

import httpx
import orjson
import trio

from leasegate.actors.runtime.periodic import JobRecord, serve_guarded
from leasegate.actors.webhooks.deliveries import Attempt, ClaimDue, RecordAttempts
from leasegate.actors.webhooks.views import Due
from leasegate.client._webhooks import sign
from leasegate.clock import iso
from leasegate.errors import QueryNotFound, TaskNotFound
from leasegate.http.models.webhook_urls import RefusedUrl, check_destination
from leasegate.http.server.render import to_json
from leasegate.system import System

# How long past the attempt's timeout a claim holds (then it is due again for anyone).
LEASE_MARGIN = 30.0
RESPONSE_KEPT = 1024  # bytes of an answer kept with the delivery
ERROR_KEPT = 1000  # characters of an error kept with it
USER_AGENT = "leasegate-webhooks/1"
FAILED_ROUND_PAUSE = 1.0  # seconds before the round after one that failed


class Deliverer:
    def __init__(self, system: System, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.system = system
        self.transport = transport  # tests: httpx.MockTransport
        self.record = JobRecord("deliver", owner="webhooks", every=math.inf)

    async def run(self) -> None:
        settings = self.system.settings
        async with httpx.AsyncClient(
                transport=self.transport, follow_redirects=False, trust_env=False,
                timeout=settings.webhook_timeout,
                limits=httpx.Limits(max_connections=settings.webhook_max_in_flight)) as http:
            await serve_guarded(self.record, self.system.clock, settings.error_log_window,
                                functools.partial(self._round, http))

    async def _round(self, http: httpx.AsyncClient) -> bool:
        try:
            await self._send_due(http)
        except Exception:
            # Counted and logged by serve_guarded; a pause first, so that a failing
            # storage is not a loop that spins. What was claimed lapses: sent again.
            await trio.sleep(FAILED_ROUND_PAUSE)
            raise
        return True

    async def _send_due(self, http: httpx.AsyncClient) -> None:
        system, settings = self.system, self.system.settings
        claimed = await system.webhooks.ask(ClaimDue(
            system.gateway, settings.webhook_max_in_flight,
            settings.webhook_timeout + LEASE_MARGIN))
        if not claimed.items:
            await self._idle(claimed.next_due)
            return
        attempts: list[Attempt] = []
        async with trio.open_nursery() as nursery:
            for due in claimed.items:
                nursery.start_soon(self._attempt, http, due, attempts)
        await system.webhooks.ask(RecordAttempts(system.gateway, tuple(attempts)))

    async def _idle(self, next_due: float | None) -> None:
        system = self.system
        wake = math.inf if next_due is None else next_due
        if system.settings.database_url is not None:
            wake = min(wake, system.clock.now() + system.settings.deadline_poll_interval)
        with trio.move_on_at(system.clock.deadline(wake)):
            await system.webhook_bell.wait()

    async def _attempt(self, http: httpx.AsyncClient, due: Due, attempts: list[Attempt]) -> None:
        body = due.body if due.body is not None else await self._body(due)
        attempt = functools.partial(Attempt, due.delivery_id, due.endpoint_id, body)
        settings = self.system.settings
        try:
            await check_destination(due.url, settings.webhook_allow_private)
        except RefusedUrl as exc:
            attempts.append(attempt(False, None, exc.message[:ERROR_KEPT], None))
            return
        timestamp = int(self.system.clock.now())
        raw = body.encode()
        headers = {
            "webhook-id": due.delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(sign(secret, due.delivery_id, timestamp, raw)
                                          for secret in due.secrets),
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            # Raw bytes back (what is kept is read as it came: no decompression, so no
            # small answer that inflates to gigabytes).
            "accept-encoding": "identity",
        }
        kept = b""
        code: int | None = None
        with trio.move_on_after(settings.webhook_timeout) as timer:
            try:
                async with http.stream("POST", due.url, content=raw, headers=headers) as answer:
                    code = answer.status_code
                    async for chunk in answer.aiter_raw():
                        kept += chunk
                        if len(kept) >= RESPONSE_KEPT:
                            break
            except httpx.HTTPError as exc:
                attempts.append(attempt(False, code,
                                        f"{type(exc).__name__}: {exc}"[:ERROR_KEPT], None))
                return
        response = kept[:RESPONSE_KEPT].decode("utf-8", "replace") if code is not None else None
        if timer.cancelled_caught:
            attempts.append(attempt(False, code, f"no answer within "
                                                 f"{settings.webhook_timeout:g} s", response))
        elif code is not None and 200 <= code < 300:
            attempts.append(attempt(True, code, None, response))
        else:
            attempts.append(attempt(False, code, f"HTTP {code} (a 2xx is a delivery; "
                                                 "redirects are not followed)", response))

    async def _body(self, due: Due) -> str:
        """The delivery's JSON: its event, when it happened, the job object."""
        jobs = self.system.jobs
        channel = jobs.tasks if due.channel == "task" else jobs.queries
        try:
            data = to_json(await channel.get(due.job_id, due.tenant))
        except (TaskNotFound, QueryNotFound):  # purged meanwhile
            data = {f"{due.channel}_id": due.job_id, "status": due.event_type.split(".")[1]}
        return orjson.dumps({"type": due.event_type, "timestamp": iso(due.created_at),
                             "data": data}).decode()
