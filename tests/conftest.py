"""Shared fixtures: a fixed wall clock, inline storage, running actors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from leasegate.clock import Clock
from leasegate.settings import Settings, load
from leasegate.storage.connection import Database
from leasegate.storage.migrations import migrate

# 2026-11-30T08:00:00Z: every test's wall clock starts here.
EPOCH = 1796025600.0


@pytest.fixture
def settings() -> Settings:
    return load(environ={}, overrides={"sqlite_synchronous": "OFF"})


@pytest.fixture
async def clock() -> Clock:
    return Clock(EPOCH)


def open_db(path: Path, *, inline: bool = True) -> Database:
    db = Database.open(path, synchronous="OFF", inline=inline)
    db.run_sync(migrate)
    return db


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return open_db(tmp_path / "leasegate.db")


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as n:
        yield n
        n.cancel_scope.cancel()
