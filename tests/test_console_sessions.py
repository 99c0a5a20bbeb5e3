"""Console sessions: bounded, expiring, ended with their key; notices shown once."""

from __future__ import annotations

import trio
import trio.testing

from leasegate.clock import Clock
from leasegate.http.console.sessions import MAX_NOTICES, Sessions


async def test_a_session_expires_after_its_lifetime(autojump_clock: trio.testing.MockClock) -> None:
    sessions = Sessions(Clock(), lifetime=60)
    session_id, session = sessions.begin("k1")
    assert sessions.key_id_of(session_id) == "k1"
    assert sessions.find("made-up") is None
    await trio.sleep(59)
    assert sessions.find(session_id) is session
    await trio.sleep(1)
    assert sessions.find(session_id) is None
    assert len(sessions) == 0


async def test_sessions_are_bounded_oldest_first(autojump_clock: trio.testing.MockClock) -> None:
    sessions = Sessions(Clock(), capacity=3)
    ids = [sessions.begin(f"k{n}")[0] for n in range(5)]
    assert len(sessions) == 3
    assert [sessions.key_id_of(i) for i in ids] == [None, None, "k2", "k3", "k4"]


async def test_a_revoked_key_ends_all_its_sessions(autojump_clock: trio.testing.MockClock) -> None:
    sessions = Sessions(Clock())
    a, _ = sessions.begin("k1")
    b, _ = sessions.begin("k1")
    c, _ = sessions.begin("k2")
    sessions.end_for_key("k1")
    assert (sessions.find(a), sessions.find(b), sessions.key_id_of(c)) == (None, None, "k2")
    # Each session has its own CSRF token.
    assert len({sessions.begin("k3")[1].csrf for _ in range(3)}) == 3


async def test_notices_are_shown_once_and_bounded(autojump_clock: trio.testing.MockClock) -> None:
    _, session = Sessions(Clock()).begin("k1")
    for n in range(MAX_NOTICES + 3):
        session.notify("ok", f"done {n}")
    shown = session.take_notices()
    assert [text for _, text in shown] == [f"done {n}" for n in range(3, MAX_NOTICES + 3)]
    assert session.take_notices() == []
