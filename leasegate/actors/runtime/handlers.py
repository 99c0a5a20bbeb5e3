"""An actor's behaviour: one handler per message type, registered on its tag.

Each actor module-level registry says what the actor does with each message it
takes; a handler is a plain function of the actor's turn context and one
message, and what it returns is checked against the message's reply type::

    KEYS = Handlers(Keys, KeysTurn)

    @KEYS.on(RevokeKey)                    # RevokeKey is an Ask[Keys, KeyView]
    def revoke(turn: KeysTurn, m: RevokeKey) -> KeyView: ...

Registering a handler for another actor's message, or one that returns another
type than the message's reply, is a type error. The message parameter's
annotation is checked against the registered type once, at import.

A request that may wait (a long-poll) is registered with :meth:`Handlers.may_wait`:
its handler may return :data:`~leasegate.actors.runtime.waiters.NOT_YET`, and
:class:`Waiting` says what it waits for, how a later turn serves it, what it gets
when the actor drains, and what gives its reply back when the caller is gone.
The deadlines (``next_wakeup``/``on_wakeup``) and start-up work of an actor
are registered here too, once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from leasegate.actors.runtime.batches import Batch
from leasegate.actors.runtime.mailbox import Ask, Message, Tell
from leasegate.actors.runtime.turn import SetBased, Turn
from leasegate.actors.runtime.waiters import NotYet, Wait
from leasegate.errors import LeasegateError

A = TypeVar("A")
M = TypeVar("M", bound=Message)
C = TypeVar("C", bound=Turn)
C_contra = TypeVar("C_contra", bound=Turn, contravariant=True)
R = TypeVar("R")

Handler = Callable[[C, Any], R]
"""``handler(turn, message)``: the message's parameter type is checked at registration."""


@dataclass(frozen=True, slots=True)
class Waiting(Generic[C_contra, R]):
    """How a request that waits is served (see :mod:`leasegate.actors.runtime.waiters`).

    ``wait(message)``: its queue and topics (None: a queue of its own, offered work
    only by a turn that wakes everyone). ``serve(turn, message)``: try again in
    a later turn (None: still nothing; the rest of its queue is skipped this turn).
    ``drained(turn, message)``: its reply when the actor drains for shutdown.
    ``give_back(reply)``: the work that undoes a reply its caller never received
    (a lease), or None. Contravariant in the turn: a spec written for a shared turn
    type (``QueueTurn``) serves each actor whose turn derives from it.
    """

    wait: Callable[[Any], Wait | None]
    serve: Callable[[C_contra, Any], R | None]
    drained: Callable[[C_contra, Any], R]
    give_back: Callable[[R], Tell[Any] | None] = lambda reply: None


class Handlers(Generic[A, C]):
    """The registry of one actor (tag ``A``, turn context ``C``)."""

    def __init__(self, tag: type[A], turn: type[C]) -> None:
        self.tag = tag
        self.handlers: dict[type[Message], Handler[C, Any]] = {}
        self.waiting: dict[type[Message], Waiting[C, Any]] = {}
        self.start: Callable[[C], None] = lambda turn: None
        self.next_wakeup: Callable[[C], float | None] = lambda turn: None
        self.on_wakeup: Callable[[C, float], None] = lambda turn, now: None
        # Several gateways: the narrow locks a message's turn holds (turn_locks).
        self.scopes: dict[type[Message], Callable[[Any], Iterable[str]]] = {}

    @overload
    def on(self, kind: Callable[..., Ask[A, R]]
           ) -> Callable[[Handler[C, R]], Handler[C, R]]: ...

    @overload
    def on(self, kind: Callable[..., Tell[A]]
           ) -> Callable[[Handler[C, None]], Handler[C, None]]: ...

    def on(self, kind: Callable[..., Message]) -> Callable[[Handler[C, Any]], Handler[C, Any]]:
        """Register the decorated function as the handler of ``kind``."""
        def register(handler: Handler[C, Any]) -> Handler[C, Any]:
            self._add(kind, handler)
            return handler

        return register

    def may_wait(self, kind: Callable[..., Ask[A, R]], spec: Waiting[C, R],
              ) -> Callable[[Handler[C, R | NotYet]], Handler[C, R | NotYet]]:
        """Register the decorated function as the handler of ``kind``, a request that
        may return ``NOT_YET`` and is then served as ``spec`` says."""
        def register(handler: Handler[C, R | NotYet]) -> Handler[C, R | NotYet]:
            self._add(kind, handler)
            assert isinstance(kind, type)
            self.waiting[kind] = spec
            return handler

        return register

    def each(self, kind: Callable[..., Batch[A, M, R]], apply: Handler[C, R],
             set_based: SetBased[C, M, R] | None = None) -> None:
        """Register for the batch message ``kind`` the handler that applies ``apply`` to
        each of its items in a savepoint of its own (:meth:`Turn.each`; ``set_based``: the
        items all at once, set-based, tried first)::

            TASKS.each(StartTasks, start)     # start: the handler of one StartTask
        """
        def apply_each(turn: C, m: Batch[A, M, R]) -> tuple[R | LeasegateError, ...]:
            return turn.each(m.items, apply, set_based)

        apply_each.__qualname__ = f"each {kind.__name__}"
        self._add(kind, apply_each)

    def locks(self, kind: Callable[..., M], scopes: Callable[[M], Iterable[str]]) -> None:
        """What a message of ``kind`` guards across gateways: ``scopes(message)`` names
        the locks (``"account acme"``) its turn takes first, with every other message's
        of the turn (``storage.turn_locks``; nothing on SQLite)."""
        assert isinstance(kind, type)
        self.scopes[kind] = scopes

    def locks_each(self, kind: Callable[..., Batch[A, M, Any]],
                   scopes: Callable[[M], Iterable[str]]) -> None:
        """:meth:`locks` of a batch message: every item's ``scopes``."""
        def of_items(m: Batch[A, M, Any]) -> Iterable[str]:
            items = m.items if isinstance(m.items, tuple) else ()
            return [scope for item in items for scope in scopes(item)]

        self.locks(kind, of_items)

    def deadlines(self, next_wakeup: Callable[[C], float | None],
                  on_wakeup: Callable[[C, float], None]) -> None:
        """The actor's data-driven timer: ``next_wakeup(turn)``, the wall time of the
        next deadline, computed at the end of each turn (it must be exact:
        ``on_wakeup`` runs only once it has come); ``on_wakeup(turn, now)`` handles
        every deadline that has passed, at the start of a turn, before any message."""
        self.next_wakeup = next_wakeup
        self.on_wakeup = on_wakeup

    def on_start(self, start: Callable[[C], None]) -> None:
        """Runs once in a transaction before the first message (its ``after_commit``
        effects run once that commits, as a message's do)."""
        self.start = start

    def _add(self, kind: Callable[..., Message], handler: Handler[C, Any]) -> None:
        if not (isinstance(kind, type) and issubclass(kind, Ask | Tell)):
            raise TypeError(f"{kind!r} is not a message type")
        if kind in self.handlers:
            raise TypeError(f"{kind.__name__} has a handler already")
        _check_message_parameter(kind, handler)
        self.handlers[kind] = handler


def _check_message_parameter(kind: type[Message], handler: Callable[..., Any]) -> None:
    """The handler's second parameter must be annotated with ``kind`` or one of its
    bases (a handler shared by two actors' messages takes their common base)."""
    parameters = list(inspect.signature(handler).parameters.values())
    if len(parameters) != 2:
        raise TypeError(f"{handler.__qualname__} must take (turn, message)")
    annotation = parameters[1].annotation
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    name = name.split("[", 1)[0].rsplit(".", 1)[-1]
    if name not in {cls.__name__ for cls in kind.__mro__}:
        raise TypeError(f"{handler.__qualname__} is registered for {kind.__name__} but "
                        f"takes {annotation!r}")
