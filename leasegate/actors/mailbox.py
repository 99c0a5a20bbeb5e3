"""How callers reach an actor: an :class:`Envelope` on its bounded inbox.

A request carries its own reply channel (size 1). The actor answers with
``send_nowait`` and never waits on a caller; a caller that is gone shows up
as a broken channel, which the actor treats as "reply undelivered"::

    reply = await actor.mailbox.ask(GetQuery("q1"))
    leases = await actor.mailbox.ask_parked(LeaseQueries("w1", wait=True),
                                            deadline=trio.current_time() + 20,
                                            give_back=release_message, on_timeout=[])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import outcome
import trio

from leasegate.errors import Unavailable

Reply = trio.MemorySendChannel[outcome.Outcome[Any]]


@dataclass(eq=False)
class Envelope:
    """A message and the channel its reply goes to (None: no reply wanted)."""

    message: Any
    reply: Reply | None = None

    def caller_gone(self) -> bool:
        return self.reply is not None and self.reply.statistics().open_receive_channels == 0


class Mailbox:
    """The only way to reach an actor: ``await ask(msg)`` or ``await tell(msg)``.

    Sends wait while the inbox is full (back-pressure). Asking a stopped actor
    raises :class:`~leasegate.errors.Unavailable`.
    """

    def __init__(self, send: trio.MemorySendChannel[Envelope]) -> None:
        self._send = send

    async def tell(self, message: Any) -> None:
        """Deliver ``message``; no reply. Cancellation: the message was not sent."""
        try:
            await self._send.send(Envelope(message))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise Unavailable("the gateway is shutting down") from None

    def tell_nowait(self, message: Any) -> None:
        """Deliver ``message`` now or raise ``trio.WouldBlock`` when the inbox is full."""
        try:
            self._send.send_nowait(Envelope(message))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise Unavailable("the gateway is shutting down") from None

    async def ask(self, message: Any) -> Any:
        """Send ``message`` and wait for the committed reply.

        Raises the :class:`LeasegateError` the actor answered with.
        Cancellation: if cancelled after the message was sent, the actor still
        applies (and commits) it; the reply is dropped.
        """
        send, recv = trio.open_memory_channel[outcome.Outcome[Any]](1)
        with recv:
            try:
                await self._send.send(Envelope(message, send))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise Unavailable("the gateway is shutting down") from None
            try:
                result = await recv.receive()
            except trio.EndOfChannel:
                raise Unavailable("the gateway is shutting down") from None
        return result.unwrap()

    async def ask_parked(
        self,
        message: Any,
        *,
        deadline: float,
        give_back: Callable[[Any], Any | None],
        on_timeout: Any = None,
    ) -> Any:
        """Ask for something the actor may hold until ``deadline`` (a long-poll).

        Returns the reply, or ``on_timeout`` if nothing came by ``deadline``.
        Cancellation (the HTTP client went away): a reply that arrives at the
        same moment is not lost. The channel is drained and closed with no
        checkpoint in between, so either the actor's ``send_nowait`` fails
        (and it gives the lease back itself) or we hold the reply and send
        ``give_back(reply)`` to the actor, shielded for up to 5 s.
        """
        send, recv = trio.open_memory_channel[outcome.Outcome[Any]](1)
        received: outcome.Outcome[Any] | None = None
        delivered = False
        try:
            try:
                await self._send.send(Envelope(message, send))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise Unavailable("the gateway is shutting down") from None
            with trio.move_on_at(deadline):
                received = await recv.receive()
            # A reply can arrive just as the caller is being cancelled (the HTTP
            # client left): then it is given back below, not returned to nobody.
            await trio.lowlevel.checkpoint_if_cancelled()
            if received is None:
                try:
                    received = recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    return on_timeout
            delivered = True
            return received.unwrap()
        except trio.EndOfChannel:
            raise Unavailable("the gateway is shutting down") from None
        finally:
            if received is None:
                # No checkpoint between these two: see the docstring.
                try:
                    received = recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    received = None
            recv.close()
            if not delivered and isinstance(received, outcome.Value):
                compensation = give_back(received.value)
                if compensation is not None:
                    with trio.move_on_after(5, shield=True):
                        await self.tell(compensation)
