"""Workers' results, the same on both channels: one, or a batch of them set-based.

Each channel says how it judges a result against its job's row (:class:`Reporting`):
a refusal (its error, raised), a retry of the accepted result (the row as it is), or
the outcome to write (:class:`Finish`); and what else an accepted result does. The rest
is shared: the rows of the results in one read, the outcomes in one UPDATE (which
returns the rows after it), their history in one insert, and the ledger told of each
job that ended with a hold. One result is a batch of one (:meth:`Reporting.one`), so the
two ways never part::

    REPORTING = Reporting(job_id=lambda m: m.query_id, judge=judge, refused=..., sql=sql)
    REPORTING.handle(QUERIES, QueryResult, QueryResults)   # one, and the batch of them
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from leasegate.actors.queue.turn import QueueTurn
from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.handlers import Handlers
from leasegate.actors.runtime.mailbox import Ask, Message
from leasegate.actors.runtime.turn import ItemByItem, answer_of_one, checked_once_each
from leasegate.errors import LeasegateError
from leasegate.storage.engine import Connection, Row
from leasegate.storage.jobs_sql import JobTable

QT = TypeVar("QT", bound=QueueTurn[Any])
M = TypeVar("M", bound=Ask[Any, Any])  # a result: a request, answered
V = TypeVar("V")


@dataclass(frozen=True)
class Finish:
    """An accepted result: what its row takes (the error's type and traceback too) and
    its history event's detail."""

    values: tuple[Any, ...]  # after the job's id, as the channel's ``finish_many`` takes
    detail: dict[str, Any]


class ResultSQL(Protocol):
    """A channel's SQL module, as results use it."""

    @property
    def JOBS(self) -> JobTable:
        """Its job table: ``JOBS.get_many``, the jobs of some ids, by id."""
        ...

    def finish_many(self, conn: Connection, finishes: Sequence[Sequence[Any]],
                    now: float, /) -> list[Row]:
        """Each ``(job_id, *Finish.values)`` written in one statement unless its lease
        changed: the rows written, as they are now."""
        ...


def _nothing(turn: Any, m: Any, before: Row, after: Row) -> None:
    return None


@dataclass(frozen=True)
class Reporting(Generic[QT, M, V]):
    """A channel's results: the job a result is of, how it is judged against the job's
    row (raises a refusal; a row: a retry of the accepted result, answered with it), the
    refusal of one whose lease changed between the read and the write, what else an
    accepted one does (``done(turn, m, before, after)``, after the history) and its SQL
    module (its functions looked up at each call)."""

    job_id: Callable[[M], str]
    judge: Callable[[QT, M, Row], Row | Finish]
    refused: Callable[[M, Row], LeasegateError]
    sql: ResultSQL
    done: Callable[[QT, M, Row, Row], None] = _nothing

    def handle(self, handlers: Handlers[Any, QT], one: type[M],
               many: Callable[..., Batch[Any, M, V]]) -> None:
        """Register the channel's result handlers: of ``one`` (:meth:`one`) and of its
        batch ``many`` (:meth:`all`, else each item in a savepoint of its own)."""
        def result(turn: QT, m: Message) -> V:
            assert isinstance(m, one)  # the runtime routes only ``one`` here; this narrows it
            return self.one(turn, m)

        handlers.on(one)(result)
        handlers.each(many, result, self.all)

    def one(self, turn: QT, m: M) -> V:
        """One result: the job's view after it, or its refusal raised."""
        return answer_of_one(self.answers(turn, [m]))

    def all(self, turn: QT, items: Sequence[M]) -> list[V | LeasegateError]:
        """A batch of results, each answered as :meth:`one` would (a refusal is an item's
        answer: it wrote nothing), set-based. Raises :class:`ItemByItem` (each item is
        then applied in a savepoint of its own) before it writes anything when an item
        fails its checks or the answers depend on the order (a job's result twice), and
        after, when a lease changed between the read and the write (PostgreSQL, another
        gateway: never within one turn)."""
        checked_once_each(items, self.job_id, "a job's result twice")
        return self.answers(turn, items)

    def answers(self, turn: QT, items: Sequence[M]) -> list[V | LeasegateError]:
        """Each result judged against its job's row (all read at once), then the
        accepted ones written at once: an answer per result, in order."""
        kind = turn.kind
        rows = self.sql.JOBS.get_many(turn.conn, [self.job_id(m) for m in items])
        answers: dict[int, V | LeasegateError] = {}
        accepted: list[tuple[int, M, Row, Finish]] = []
        for at, m in enumerate(items):
            job_id = self.job_id(m)
            row = rows.get(job_id)
            try:
                if row is None:
                    raise kind.not_found(f"no {kind.noun} {job_id}")
                verdict = self.judge(turn, m, row)
            except LeasegateError as exc:
                answers[at] = exc
                continue
            if isinstance(verdict, Finish):
                accepted.append((at, m, row, verdict))
            else:
                answers[at] = kind.view(verdict)
        if accepted:
            answers.update(self._finish(turn, accepted))
        return [answers[at] for at in range(len(items))]

    def _finish(self, turn: QT, accepted: Sequence[tuple[int, M, Row, Finish]],
                ) -> list[tuple[int, V]]:
        """The accepted results written in one statement (their rows returned), their
        history in one; each one's view, by its place."""
        conn, kind = turn.conn, turn.kind
        ids = [self.job_id(m) for _, m, _, _ in accepted]
        finishes = [(job_id, *finish.values)
                    for job_id, (_, _, _, finish) in zip(ids, accepted, strict=True)]
        finished = self.sql.finish_many(conn, finishes, turn.now)
        if len(finished) != len(finishes):
            if len(accepted) > 1:
                raise ItemByItem("a lease changed between the read and the write")
            _, m, row, _ = accepted[0]
            raise self.refused(m, row)
        after = {row[kind.id_column]: row for row in finished}
        turn.history.record_many("result", [
            (job_id, after[job_id], finish.detail)
            for job_id, (_, _, _, finish) in zip(ids, accepted, strict=True)])
        views = []
        for job_id, (at, m, before, _) in zip(ids, accepted, strict=True):
            self.done(turn, m, before, after[job_id])
            turn.settle.ended(after[job_id])
            views.append((at, kind.view(after[job_id])))
        return views
