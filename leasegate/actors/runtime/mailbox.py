"""How callers reach an actor: typed messages through its :class:`Ref`.

Every actor has a *tag*, an empty class that names it (``Tasks``, ``Ledger``, ...).
A request declares the actor that takes it and the type of its reply by
subclassing :class:`Ask`; a message that wants no reply subclasses :class:`Tell`.
What routes and other actors hold is a ``Ref[Tag]``: it takes only the messages of
its actor, and :meth:`Ref.ask` returns exactly the reply type, so mypy checks both
sides of the seam::

    @dataclass(frozen=True)
    class GetQuery(Ask[Queries, QueryView]):
        query_id: str

    view = await queries.ask(GetQuery("q1"))          # a QueryView
    await tasks.ask(GetQuery("q1"))                    # a type error: not a task message
    leases = await queries.ask_until(
        LeaseQueries("w1", wait=True), deadline=trio.current_time() + 20,
        give_back=release_message, on_timeout=())

A message is contravariant in its tag: one that a base tag takes (``JobQueue``)
is taken by the refs of every actor whose tag derives from it (``Tasks``,
``Queries``). A ``Ref`` is invariant in its tag: a ``Ref[Ledger]`` never stands
where a ``Ref[Tasks]`` is wanted.

A request carries its own one-shot :class:`Reply` slot. The actor answers with
``send_nowait`` and never waits on a caller; a caller that is gone shows up
as a broken slot, which the actor treats as "reply undelivered".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, Final, Generic, TypeVar

import outcome
import trio

from leasegate.errors import LeasegateError, Unavailable

A = TypeVar("A")
A_contra = TypeVar("A_contra", contravariant=True)
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")

request_id: ContextVar[str | None] = ContextVar("leasegate_request_id", default=None)
"""The id of the HTTP request being served (set by the HTTP layer); every message
sent from that request carries it, so an actor's log lines name the request."""


class Message:
    """What every message has: :meth:`check`, which the actor calls before it acts."""

    __slots__ = ()

    def check(self) -> None:
        """Raise :class:`~leasegate.errors.InvalidRequest` if a field breaks a rule.

        The HTTP edge validates too, but an actor defends its own invariants:
        a bad value sent straight to it is a domain error, never a crash.
        """


class Ask(Message, Generic[A_contra, R_co]):
    """A request to the actor tagged ``A_contra`` whose reply is an ``R_co``."""

    __slots__ = ()


class Tell(Message, Generic[A_contra]):
    """A message to the actor tagged ``A_contra`` that wants no reply (internal work,
    compensations, notices)."""

    __slots__ = ()


class Reply(Generic[R]):
    """A one-shot slot for one reply: what a size-1 memory channel did here, at a
    tenth of its memory (a waiting long-poll holds one for as long as it waits).

    The actor's side: :meth:`send_nowait` (``trio.BrokenResourceError`` once the
    caller has left) and :meth:`close` (no reply will come). The caller's side:
    :meth:`receive` and :meth:`leave`, which returns a reply already delivered
    and breaks the slot, with no checkpoint, so a reply is either taken by the
    caller or refused to the actor, never lost between them.
    """

    __slots__ = ("_closed", "_gone", "_result", "_waiter")

    def __init__(self) -> None:
        self._result: outcome.Outcome[R] | None = None
        self._waiter: trio.lowlevel.Task | None = None
        self._closed = False  # the actor will send nothing (more)
        self._gone = False  # the caller left

    def send_nowait(self, result: outcome.Outcome[R]) -> None:
        if self._gone:
            raise trio.BrokenResourceError
        if self._closed or self._result is not None:
            raise trio.ClosedResourceError
        self._result = result
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None:
            trio.lowlevel.reschedule(self._waiter)
            self._waiter = None

    async def receive(self) -> outcome.Outcome[R]:
        """The reply; ``trio.EndOfChannel`` if the actor closed the slot without one.
        A checkpoint: a cancel that arrives with the reply leaves it in the slot."""
        if self._result is None and not self._closed:
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        else:
            await trio.lowlevel.checkpoint()
        return self.receive_nowait()

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def receive_nowait(self) -> outcome.Outcome[R]:
        if self._result is not None:
            return self._result
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    def leave(self) -> outcome.Outcome[R] | None:
        """The caller stops waiting: the reply if one came (now the caller's to use
        or give back), else None, and from now on the actor's send fails."""
        self._gone = True
        result, self._result = self._result, None
        return result


NOT_WAITING: Final[Hashable] = object()
"""``Envelope.queue`` of an envelope that is in no waiters' queue."""


class _TimedOut:
    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT: Final[outcome.Outcome[Any]] = outcome.Value(_TimedOut())
"""What the actor answers a waiting envelope whose deadline has come (never unwrapped)."""


class Envelope(Generic[R]):
    """A message, the channel its reply goes to (None: no reply wanted), and the id
    of the request it was sent for; while it waits, the key of its queue (see
    :mod:`leasegate.actors.runtime.waiters`). ``left``: its caller stopped waiting.
    ``deadline`` (trio time): when the actor answers it :data:`TIMED_OUT` if
    still waiting.

    Slots: a waiting long-poll holds one of these for as long as it waits.
    """

    __slots__ = ("deadline", "left", "message", "queue", "reply", "request_id")

    def __init__(self, message: Ask[Any, R] | Tell[Any], reply: Reply[R] | None = None,
                 deadline: float = math.inf) -> None:
        self.message = message
        self.deadline = deadline
        self.reply = reply
        self.request_id = request_id.get()
        self.queue = NOT_WAITING
        self.left = False


def _gone() -> LeasegateError:
    return Unavailable("the gateway is shutting down")


class Ref(Generic[A]):
    """The only way to reach the actor tagged ``A``: ``await ask(msg)`` or
    ``await tell(msg)``, for its own messages only.

    Sends wait while the inbox is full (back-pressure). Asking a stopped actor
    raises :class:`~leasegate.errors.Unavailable`.
    """

    def __init__(self, send: trio.MemorySendChannel[Envelope[Any]],
                 leave: Callable[[Envelope[Any]], None] = lambda env: None) -> None:
        self._send = send
        self._leave = leave  # the actor's Waiters.leave: a caller gone stops waiting at once

    async def _deliver(self, env: Envelope[Any]) -> None:
        """Put ``env`` in the inbox, waiting only while it is full. A checkpoint for
        cancellation alone (cancelled: nothing sent): the caller's wait for the
        reply is where it yields, so the send does not yield once more (as the
        channel's ``send`` does) on the way there."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            try:
                self._send.send_nowait(env)
            except trio.WouldBlock:
                await self._send.send(env)  # back-pressure
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise _gone() from None

    async def tell(self, message: Tell[A]) -> None:
        """Deliver ``message``; no reply. Cancellation: the message was not sent."""
        try:
            await self._send.send(Envelope(message))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise _gone() from None

    def tell_nowait(self, message: Tell[A]) -> None:
        """Deliver ``message`` now or raise ``trio.WouldBlock`` when the inbox is full."""
        try:
            self._send.send_nowait(Envelope(message))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise _gone() from None

    async def ask(self, message: Ask[A, R]) -> R:
        """Send ``message`` and wait for the committed reply.

        Raises the :class:`LeasegateError` the actor answered with.
        Cancellation: if cancelled after the message was sent, the actor still
        applies (and commits) it; the reply is dropped.
        """
        reply = Reply[R]()
        env = Envelope(message, reply)
        await self._deliver(env)
        try:
            result = await reply.receive()
        except trio.EndOfChannel:
            raise _gone() from None
        finally:
            reply.leave()
            self._leave(env)  # if the actor keeps it waiting (wait=True), out now
        return result.unwrap()

    async def ask_until(
        self,
        message: Ask[A, R],
        *,
        deadline: float,
        give_back: Callable[[R], Tell[A] | None],
        on_timeout: T,
    ) -> R | T:
        """Ask for something the actor may hold until ``deadline`` (a long-poll).

        Returns the reply, or ``on_timeout`` if nothing came by ``deadline``.
        The actor keeps the time: it answers :data:`TIMED_OUT` to a message still
        waiting at ``deadline`` (the caller holds no cancel scope while it waits).
        Cancellation (the HTTP client went away): a reply that arrives at the
        same moment is not lost. The slot is emptied and broken with no
        checkpoint in between (:meth:`Reply.leave`), so either the actor's
        ``send_nowait`` fails (and it gives the lease back itself) or we hold
        the reply and send ``give_back(reply)`` to the actor, shielded for up to 5 s.
        """
        reply = Reply[R]()
        env = Envelope(message, reply, deadline)
        received: outcome.Outcome[R] | None = None
        delivered = False
        try:
            await self._deliver(env)
            received = await reply.receive()
            if received is TIMED_OUT:
                return on_timeout
            delivered = True
            return received.unwrap()
        except trio.EndOfChannel:
            raise _gone() from None
        finally:
            # No checkpoint between taking a reply that came and breaking the slot
            # (see the docstring).
            late = reply.leave()
            if received is None:
                received = late
            # Out of the actor's waiters at once (a timeout or a cancelled
            # request): no turn has to look at it again.
            self._leave(env)
            if (not delivered and isinstance(received, outcome.Value)
                    and received is not TIMED_OUT):
                compensation = give_back(received.value)
                if compensation is not None:
                    with trio.move_on_after(5, shield=True):
                        await self.tell(compensation)
