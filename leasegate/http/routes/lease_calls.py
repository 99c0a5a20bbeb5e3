"""A lease call that carries the outcomes of the worker's previous jobs (``results``):
one request per lease call instead of a lease call and a results call.

The results and the lease go to the queue as one message (one turn, one commit);
each result is answered on its own, as ``POST /v1/<jobs>/results`` answers it. A
lease that finds nothing and may wait is then asked again as a plain long-poll (the
results are committed and answered by then, so a waiting call holds nothing but the
wait). A retry with the same ``request_id`` and the same results answers the same:
each result is a retry of an accepted one, the lease a replay of its leases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from leasegate.actors.channels import JobQueue
from leasegate.actors.jobs.channel import JobChannel, JobView
from leasegate.actors.keys.views import Principal
from leasegate.actors.queue.leasing import LeaseCall
from leasegate.actors.runtime.mailbox import Ask, Message, Tell
from leasegate.errors import LeasegateError
from leasegate.http.models.jobs import LeaseBody
from leasegate.http.routes import batches
from leasegate.http.server.auth import worker_sites
from leasegate.http.server.long_poll import lease_reply
from leasegate.http.server.render import to_json

A = TypeVar("A", bound=JobQueue)
L = TypeVar("L")
M = TypeVar("M", bound=Message)
V = TypeVar("V", bound=JobView)

After = Callable[[tuple[M, ...], LeaseCall[A, L]],
                 Ask[A, tuple[tuple[V | LeasegateError, ...], tuple[L, ...]]]]


async def lease_after_results(
        noun: str, channel: JobChannel[A, Any, V], call: Callable[..., LeaseCall[A, L]],
        data: LeaseBody, principal: Principal, results: Sequence[M | LeasegateError] | None,
        after: After[M, A, L, V], give_back: Callable[[tuple[L, ...]], Tell[A] | None],
        ) -> dict[str, Any]:
    """``POST /v1/<jobs>/lease``: ``data`` asked by the worker key ``principal`` as the
    channel's ``call``, with ``results`` (None: a plain lease call)."""
    wait_seconds = data.wait_seconds
    lease = call(worker_id=data.worker_id, sites=worker_sites(principal, data.sites),
                 max=data.max, request_id=data.request_id, wait=wait_seconds > 0,
                 key_id=principal.key_id)
    if results is None:
        return await lease_reply(channel.queue, lease, wait_seconds, give_back)
    taken = [item for item in results if not isinstance(item, LeasegateError)]
    answers: list[V | LeasegateError] = [
        item for item in results if isinstance(item, LeasegateError)]
    leases: tuple[L, ...] = ()
    if taken:  # one message: every result, then the lease (never waiting in there)
        done, leases = await channel.queue.ask(
            after(tuple(taken), dataclasses.replace(lease, wait=False)))
        replies = iter(done)
        answers = await channel.billed_each([
            item if isinstance(item, LeasegateError) else next(replies) for item in results])
    reply: dict[str, Any]
    if leases or (taken and not lease.wait):
        reply = {"items": to_json(leases)}
    else:  # nothing yet: the lease alone, as a long-poll
        reply = await lease_reply(channel.queue, lease, wait_seconds, give_back)
    reply["results"] = batches.reply(noun, answers)["items"]
    return reply
