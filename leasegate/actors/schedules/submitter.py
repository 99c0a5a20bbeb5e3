"""What submits the schedules actor's claimed fires, outside any turn: the submitter (a
service of the system), and a trigger's fire made at once (:func:`trigger`).

A fire submits through the jobs facade, as ``POST /v1/tasks`` would (its ``max_cost``
held on the tenant's account first), under its job id: a fire submitted twice (handed
over again after a crash, or by two gateways) is a replay, one job. Its outcome is then
recorded on the fire; a refusal (402 short funds, 409 a job of that id with another
payload) is recorded, not retried: the next fire is the next chance.
"""

from __future__ import annotations

import math
from typing import Any

from leasegate.actors.jobs import Jobs
from leasegate.actors.jobs.channel import JobChannel
from leasegate.actors.runtime.background import Outbox
from leasegate.actors.runtime.periodic import JobRecord
from leasegate.actors.schedules import SchedulesRef
from leasegate.actors.schedules.records import FireDone, TriggerSchedule, submit_of
from leasegate.actors.schedules.turn import FireKey, PendingFire
from leasegate.errors import LeasegateError, NotFound, QueryNotFound, TaskNotFound, Unavailable


class Submitter:
    """Submits the outbox's fires in order, then records each one's outcome (a crash
    in between: the fire stays pending and is handed over again)."""

    def __init__(self, outbox: Outbox[FireKey, PendingFire], *, schedules: SchedulesRef,
                 jobs: Jobs | None) -> None:
        self.outbox = outbox
        self.schedules = schedules
        self.jobs = jobs
        self.record = JobRecord("submit_fires", owner="schedules", every=math.inf)

    async def submit_next(self) -> bool:
        await fire(self.schedules, self.jobs, await self.outbox.take())
        return True


async def fire(schedules: SchedulesRef, jobs: Jobs | None, item: PendingFire) -> FireDone:
    """Submit ``item``'s job (unless overlap skips it) and record the outcome."""
    done = FireDone(item.schedule_id, item.fire_at, "submitted")
    if jobs is not None:
        channel: JobChannel[Any, Any, Any] = jobs.tasks if item.channel == "task" else jobs.queries
        try:
            if await _unfinished(channel, item.previous_job_id, item.tenant):
                done = FireDone(item.schedule_id, item.fire_at, "skipped")
            else:
                await channel.submit(submit_of(item.channel, item.tenant, item.job_id,
                                               item.template))
        except Unavailable:
            raise  # nothing changed: the fire stays pending, handed over again later
        except LeasegateError as exc:
            done = FireDone(item.schedule_id, item.fire_at, "failed", {
                "code": exc.code, "type": exc.type, "message": exc.message})
    await schedules.ask(done)
    return done


async def trigger(schedules: SchedulesRef, jobs: Jobs, schedule_id: str,
                  tenant: str | None) -> None:
    """Fire ``schedule_id`` now, and record the outcome before returning."""
    await fire(schedules, jobs, await schedules.ask(TriggerSchedule(schedule_id, tenant)))


async def _unfinished(channel: JobChannel[Any, Any, Any], job_id: str | None,
                      tenant: str) -> bool:
    if job_id is None:
        return False
    try:
        view = await channel.get(job_id, tenant)
    except (NotFound, TaskNotFound, QueryNotFound):
        return False  # never made (refused), or purged: finished
    return view.status not in channel.kind.terminal
