"""Shared fixtures: a fixed wall clock, inline storage, running actors, a PostgreSQL
database of its own for a test that asks for one (``postgres_url``)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import trio
import trio.testing

from leasegate.actors.runtime.actor import Actor
from leasegate.actors.runtime.mailbox import Ask
from leasegate.clock import Clock
from leasegate.http.server.render import to_json
from leasegate.settings import Settings, load
from leasegate.storage.connection import Database as SqliteDatabase
from leasegate.storage.database import Database, migrate
from leasegate.storage.postgres.database import Database as PostgresDatabase
from tests import postgres
from tests.served import Served, start, stop

if TYPE_CHECKING:
    from leasegate.system import System

A = TypeVar("A")
ActorT = TypeVar("ActorT", bound="Actor[Any, Any]")

# 2026-11-30T08:00:00Z: every test's wall clock starts here.
EPOCH = 1796025600.0


@pytest.fixture(scope="session")
def postgres_server() -> postgres.Server:
    """The server of LEASEGATE_TEST_POSTGRES (its tests fail if it does not answer), or
    of the default address (its tests skip if nothing answers there)."""
    server, why_not, required = postgres.find_server()
    if server is None:
        if required:
            pytest.fail(f"{why_not}, and {postgres.SERVER_VARIABLE} requires it")
        pytest.skip(why_not)
    return server


@pytest.fixture
def postgres_url(postgres_server: postgres.Server) -> Iterator[str]:
    """A fresh, empty PostgreSQL database of this test's own (dropped after it)."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the PostgreSQL tests skipped without a server, not one per test."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if postgres.SKIP_REASON in str(report.longrepr)]
    if skipped:
        reason = str(skipped[0].longrepr[2]) if isinstance(skipped[0].longrepr, tuple) else ""
        terminalreporter.write_line(
            f"{len(skipped)} PostgreSQL tests skipped: {reason.removeprefix('Skipped: ')} "
            f"(set {postgres.SERVER_VARIABLE} to require a server)")


ENGINES = ("sqlite", "postgres")

# The slowest files, slowest first, with their seconds in a whole run on 2 workers
# (``make test``: pytest -n 2 --dist loadfile --no-loadscope-reorder). Handed out first,
# so that the two workers end together rather than one starting the longest file when
# the other is nearly done (xdist's own order is by number of tests). The figures only
# order the list; a file not named comes after, in collection order.
SLOW_FILES: dict[str, float] = {  # measured: junit times of a whole run, 2026-12-03
    "test_schemathesis_roles.py": 48,
    "test_readme.py": 45,
    "test_http_tasks.py": 37,
    "test_console_browser.py": 35,
    "test_gateways_served.py": 34,
    "test_schemathesis.py": 33,
    "test_serve_e2e.py": 23,
    "test_ledger.py": 16,
    "test_periodic_jobs.py": 16,
    "test_cli_inspect.py": 15,
    "test_sites_served.py": 14,
    "test_devices_served.py": 12,
    "test_sdk_e2e.py": 10,
    "test_durability.py": 10,
    "test_tasks_actor.py": 10,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of ``SLOW_FILES`` first, slowest first (each file's tests keep their
    order: a stable sort)."""
    rank = {name: -seconds for name, seconds in SLOW_FILES.items()}
    items.sort(key=lambda item: rank.get(item.path.name, 0.0))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_engines: run the module's tests on SQLite and on PostgreSQL "
                   "(through the engine fixture: its gateway, db and settings)")
    config.addinivalue_line(
        "markers", "no_housekeeping: the settings fixture's housekeeping_interval is a day "
                   "(a test that lets hours pass and purges nothing)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that opens storage through ``engine`` (the fixtures gateway, db,
    settings, database_url) runs on SQLite; a module marked ``both_engines``
    (``pytestmark = pytest.mark.both_engines``) runs its tests on PostgreSQL too, each
    on a database of its own."""
    if ("engine" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("both_engines") is not None):
        metafunc.parametrize("engine", ENGINES, indirect=True)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    """``sqlite`` or ``postgres``: which engine this run of the test uses."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def postgres_template(postgres_server: postgres.Server) -> Iterator[str]:
    """A database migrated once per test process, copied for each test that needs one."""
    url = postgres_server.migrated_template()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture(scope="session")
def postgres_pool(postgres_server: postgres.Server,
                  postgres_template: str) -> Iterator[postgres.Pool]:
    """This test process's migrated databases (copies of the template), reused: a
    ``CREATE DATABASE ... TEMPLATE`` costs about 0.3 s, a reset some 20 ms."""
    pool = postgres.Pool(postgres_server, postgres_template)
    yield pool
    pool.close()


@pytest.fixture
def database_url(engine: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None on SQLite (the file in the test's data directory); on PostgreSQL, a migrated
    database of this test's own: as a fresh copy of the template is (no other test's
    rows, sessions, locks, channels or settings), reset for the next one after it."""
    if engine == "sqlite":
        yield None
        return
    pool: postgres.Pool = request.getfixturevalue("postgres_pool")
    url = pool.take()
    yield url
    pool.give_back(url)


@pytest.fixture
def settings(database_url: str | None) -> Settings:
    # OFF: tests never meet a power cut, and run faster without fsync. On PostgreSQL the
    # deadline poll (meeting other gateways' deadlines) is an hour: one gateway's turns set
    # every deadline, and a test that lets virtual days pass would take a turn a second
    # (the tests of several gateways set it back). So is SQLite's look for keys revoked
    # by another process (the tests of the CLI's revocation set it back).
    return load(environ={}, overrides={"sqlite_synchronous": "OFF", "unsafe_durability": True,
                                       "database_url": database_url,
                                       "deadline_poll_interval": 3600,
                                       "key_revocation_poll_interval": 3600})


@pytest.fixture
async def clock() -> Clock:
    return Clock(EPOCH)


def open_db(path: Path, *, inline: bool = True, database_url: str | None = None) -> Database:
    """The test's database, connected and migrated: the SQLite file ``path``, or the
    PostgreSQL database of ``database_url``."""
    db: Database
    if database_url is None:
        db = SqliteDatabase.open(path, synchronous="OFF", inline=inline)
    else:
        db = PostgresDatabase.open(database_url, inline=inline)
    db.run_sync(migrate)
    return db


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return open_db(tmp_path / "leasegate.db")


async def started(nursery: trio.Nursery, actor: ActorT) -> ActorT:
    """``actor``, started in ``nursery`` (its inbox open)."""
    await nursery.start(actor.run)
    return actor


async def ask(actor: Actor[A, Any], message: Ask[A, Any]) -> Any:
    """``actor``'s reply to ``message`` as the API renders it."""
    return to_json(await actor.ref.ask(message))


async def parked(actor: Any, message: Any, *, deadline: float,
                 give_back: Callable[[Any], Any], on_timeout: object) -> Any:
    """``ask_until``, with the reply as the API renders it."""
    reply = await actor.ref.ask_until(message, deadline=deadline, give_back=give_back,
                                       on_timeout=on_timeout)
    return to_json(reply)


async def assert_none_lost_at_hand_off(
        actor: Any, lease: Any, *, give_back: Callable[[Any], Any], prefix: str,
        submit: Callable[[str], Awaitable[Any]], read: Callable[[str], Awaitable[Any]],
        clear: Callable[[], Awaitable[None]]) -> None:
    """Cancel a parked long-poll ``lease`` at every point around the hand-off of a job
    submitted while it waits: the job is either delivered to it, or back in the queue at
    once and never attempted. Each round's job is ``prefix`` and the round; ``clear``
    finishes what a round leaves leased."""
    for cut in range(6):
        job_id = f"{prefix}{cut}"
        received = await _lease_cut_at_hand_off(actor, lease, functools.partial(submit, job_id),
                                                cut, give_back)
        row = await read(job_id)
        if received:
            assert row["status"] == "leased"
        else:
            assert (row["status"], row["attempts"]) == ("queued", 0), (cut, row)
        await clear()


async def _lease_cut_at_hand_off(actor: Any, lease: Any, submit: Callable[[], Awaitable[Any]],
                                 cut: int, give_back: Callable[[Any], Any]) -> list[Any]:
    """The items a parked ``lease`` received, its caller gone ``cut`` checkpoints after
    ``submit`` started (none when cut before the hand-off)."""
    received: list[Any] = []
    scope = trio.CancelScope()

    async def poll() -> None:
        with scope:
            received.extend(await parked(actor, lease, deadline=trio.current_time() + 30,
                                         give_back=give_back, on_timeout=()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(submit)
        for _ in range(cut):
            await trio.lowlevel.checkpoint()
        scope.cancel()
    await trio.testing.wait_all_tasks_blocked()
    return received


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as n:
        yield n
        n.cancel_scope.cancel()


class Gateway:
    """A running system and its app, with one key per role (and two tenants)."""

    def __init__(self, system: System, app: Any) -> None:
        self.system = system
        self.app = app
        self.client = app.test_client()
        self.keys: dict[str, str] = {}

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}

    async def call(self, method: str, path: str, who: str | None = None,
                   **kwargs: Any) -> tuple[int, Any]:
        headers = dict(kwargs.pop("headers", {}))
        if who is not None:
            headers.update(self.auth(who))
        response = await self.client.open(path, method=method, headers=headers, **kwargs)
        body = await response.get_json()
        return response.status_code, body


async def start_gateway(nursery: trio.Nursery, path: Path, settings: Settings,
                        clock: Clock, *, inline: bool = True,
                        webhook_transport: Any = None) -> Gateway:
    """A system and its app (``inline``: its storage on the trio thread, for the autojump
    clock; else each connection on its own thread, as served; ``webhook_transport``: an
    httpx transport the webhooks go to)."""
    from leasegate.actors.keys.records import CreateKey, Role
    from leasegate.http.app import create_app
    from leasegate.system import new_system

    system = new_system(path, settings, clock=clock, inline_storage=inline)
    app = create_app(system, webhook_transport=webhook_transport)
    await nursery.start(system.run)
    gateway = Gateway(system, app)
    keys: tuple[tuple[str, Role, str | None], ...] = (
        ("admin", "admin", None), ("worker", "worker", None),
        ("t1", "client", "t1"), ("t2", "client", "t2"))
    for who, role, tenant in keys:
        created = await system.keys.ask(CreateKey(role, who, tenant))
        gateway.keys[who] = created.key
    return gateway


@pytest.fixture
async def gateway(nursery: trio.Nursery, tmp_path: Path, settings: Settings,
                  clock: Clock) -> Gateway:
    return await start_gateway(nursery, tmp_path / "leasegate.db", settings, clock)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A real ``leasegate serve`` subprocess on a fresh data directory."""
    s = start(tmp_path / "var", {"LEASEGATE_HOUSEKEEPING_INTERVAL": "0.2",
                                  "LEASEGATE_ARTIFACT_ORPHAN_SWEEP_INTERVAL": "0.2",
                                  "LEASEGATE_LEDGER_RECOVER_INTERVAL": "0.2",
                                  "LEASEGATE_LEDGER_AUDIT_INTERVAL": "0.2"})
    yield s
    if s.process.poll() is None:
        stop(s)
