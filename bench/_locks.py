"""The locks a run on PostgreSQL holds and waits on, sampled from the server's own views,
and the throughput at which each would saturate (``bench/lifecycle.py --database``).

A thread of the bench reads ``pg_locks`` and ``pg_stat_activity`` of the run's database
every ``INTERVAL`` seconds (one statement on a connection of its own) and counts, per
lock: the samples in which someone held it, and the sessions waiting for it. The
fraction of samples a lock was held exclusive is the fraction of the run it was held (a
lock held ``h`` of the time at ``r`` jobs/s is held all the time at ``r / h``: where the
cluster saturates it, whatever the number of gateways); a lock held shared only (the
submits' ``job ids``) serializes nobody but its exclusive taker and is shown apart; the
average number of waiters is the waiting sessions per second of run.

Advisory locks are named from their keys: the bench computes the keys of the fixed scope
names (``storage/turn_locks.py``); the keys of per-account, per-hold, per-credit,
per-key-id scopes are one-way hashes and are counted together. A transaction that sent a
NOTIFY holds the server's lock of its notification queue while it commits (one for the
whole server): named too. Row locks are not in ``pg_locks`` while held, only while
waited on: a waiter is attributed to the table
of the tuple it waits for (``relation`` of its tuple lock), and its hold time is not
known (it is at most the holder's transaction).

The sampler's own backend costs CPU on the server: :attr:`LockSampler.own_cpu` is its
backend's CPU, for the run to subtract from PostgreSQL's.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import psycopg
from _readings import cpu_seconds
from _report import say

from leasegate.storage.turn_locks import scope_key

INTERVAL: Final = 0.01
NAMED: Final = ("job ids tasks", "job ids queries", "devices capacity", "keys first")
OTHER_SCOPES: Final = "accounts, holds, credits, workers of a key, devices"
# Every lock of the run's database: advisory ones with their key, a waiter with the
# table of the tuple it waits for.
_SAMPLE: Final = """
SELECT l.locktype, l.granted, l.pid, l.mode,
       CASE WHEN l.locktype = 'advisory'
            THEN (l.classid::bigint << 32) | l.objid::bigint END AS key,
       coalesce(l.relation, (SELECT t.relation FROM pg_locks AS t WHERE t.pid = l.pid
                             AND t.locktype = 'tuple' AND t.granted LIMIT 1))::regclass::text
           AS rel
FROM pg_locks AS l
WHERE l.pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())
  AND (l.locktype = 'advisory' OR NOT l.granted
       OR (l.locktype = 'object' AND l.classid = 'pg_database'::regclass AND l.objid = 0))
"""


def _signed(key: int) -> int:
    return key - (1 << 64) if key >= 1 << 63 else key


@dataclass
class LockTable:
    """What the samples saw: per lock, the samples it was held in and the waiters."""

    samples: int = 0
    held: Counter[str] = field(default_factory=Counter)  # held exclusive
    shared: Counter[str] = field(default_factory=Counter)  # held shared only
    waiters: Counter[str] = field(default_factory=Counter)

    def held_fraction(self, lock: str) -> float:
        """The share of the run someone held ``lock`` exclusive (what serializes)."""
        return self.held[lock] / self.samples if self.samples else 0.0

    def shared_fraction(self, lock: str) -> float:
        """The share of the run ``lock`` was held shared and by nobody exclusive
        (holders beside each other; only an exclusive taker waits for them)."""
        return self.shared[lock] / self.samples if self.samples else 0.0

    def waiting(self, lock: str) -> float:
        """Sessions waiting for ``lock``, on average over the run."""
        return self.waiters[lock] / self.samples if self.samples else 0.0

    @property
    def locks(self) -> list[str]:
        return sorted(set(self.held) | set(self.shared) | set(self.waiters))


class LockSampler:
    """Samples the locks of ``database`` (a URL) on a thread, from :meth:`start` to
    :meth:`stop`."""

    def __init__(self, database: str) -> None:
        self.table = LockTable()
        self.own_cpu = 0.0
        self._conn = psycopg.connect(database, autocommit=True)
        self._pid = int(self._conn.info.backend_pid)
        self._names = {scope_key(name): f"advisory: {name}" for name in NAMED}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu0 = 0.0

    def start(self) -> None:
        self._cpu0 = self._backend_cpu()
        self._thread.start()

    def stop(self) -> LockTable:
        self._stop.set()
        self._thread.join()
        self.own_cpu = self._backend_cpu() - self._cpu0
        self._conn.close()
        return self.table

    def _backend_cpu(self) -> float:
        try:
            return cpu_seconds(self._pid)
        except OSError:  # a server on another machine: nothing to subtract here
            return 0.0

    def _name(self, locktype: str, key: int | None, rel: str | None) -> str:
        if locktype == "advisory" and key is not None:
            return self._names.get(_signed(key), f"advisory: {OTHER_SCOPES}")
        if locktype == "object":  # the server's one lock of its notification queue
            return "NOTIFY queue (the commit of a transaction that notified)"
        if rel is not None:
            return f"rows of {rel}"
        return locktype

    def _run(self) -> None:
        table = self.table
        while not self._stop.wait(INTERVAL):
            held: set[str] = set()
            shared: set[str] = set()
            for locktype, granted, pid, mode, key, rel in self._conn.execute(_SAMPLE):
                if pid == self._pid:
                    continue
                name = self._name(locktype, key, rel)
                if not granted:
                    table.waiters[name] += 1
                elif mode == "ShareLock":
                    shared.add(name)
                else:
                    held.add(name)
            table.held.update(held)
            table.shared.update(shared - held)
            table.samples += 1


LockRun = tuple[str, int, float, float, float, LockTable]
"""One PostgreSQL run of a mode: its label, gateways, jobs/s, the gateways' CPU per job
(us, all of them), PostgreSQL's CPU per job (us), and its locks."""
GATEWAYS_PROJECTED: Final = (1, 2, 4, 8)
HOT_PATH_LIMIT: Final = 0.10  # of the run: the most a lock on the hot path may be held


def report_locks(runs: list[LockRun]) -> None:
    """Per mode: each run's locks (held, waited on, where they saturate), the gateways'
    CPU per job from 1 to N gateways, and the projected capacity of 1, 2, 4, 8."""
    if not runs:
        return
    say()
    say("Locks on PostgreSQL (sampled every 10 ms from pg_locks): held = share of the run "
        "someone held it exclusive; shared only = held shared (holders beside each other) "
        "and by nobody exclusive; waiters = sessions waiting, on average; saturates = "
        "jobs/s at which it would be held exclusive all the time (jobs/s / held)")
    for label in dict.fromkeys(run[0] for run in runs):
        mine = sorted((run for run in runs if run[0] == label), key=lambda run: run[1])
        for _, gateways, rate, _, _, table in mine:
            say(f"  {label}, {gateways} gateway(s), {rate:,.0f} jobs/s, "
                f"{table.samples} samples:")
            if not table.locks:
                say("    no lock held or waited on in any sample")
            for lock in table.locks:
                held = table.held_fraction(lock)
                saturates = (f"{rate / held:,.0f} jobs/s" if held
                             else "never (never held exclusive)")
                if lock.startswith("rows of"):
                    saturates = "(row lock: seen only while waited on)"
                flag = "  OVER 10%" if held > HOT_PATH_LIMIT else ""
                say(f"    {lock:<58} held {held:6.1%}  shared only "
                    f"{table.shared_fraction(lock):6.1%}  waiters {table.waiting(lock):5.2f}  "
                    f"saturates {saturates}{flag}")
        first = mine[0]
        cpus = ", ".join(f"{gateways}: {gw_us / 1e3:.2f} ms" for _, gateways, _, gw_us, _, _
                         in mine)
        flat = (f" ({mine[-1][3] / first[3]:.2f}x with {mine[-1][1]})"
                if len(mine) > 1 and first[3] else "")
        say(f"    gateways' CPU per job by gateways: {cpus}{flat}")
        _projection(first)
    over = [f"{lock} ({label}, {gateways} gateway(s): {table.held_fraction(lock):.0%})"
            for label, gateways, _, _, _, table in runs for lock in table.locks
            if table.held_fraction(lock) > HOT_PATH_LIMIT]
    say("  " + (f"held more than {HOT_PATH_LIMIT:.0%} of a run: {'; '.join(over)}" if over
                else f"no lock on the hot path held more than {HOT_PATH_LIMIT:.0%} of the run"))


def _projection(run: LockRun) -> None:
    """Capacity of N gateways, each on cores of its own, from the one-gateway run:
    min(N x one gateway's jobs/s at one core, the lowest saturation of a lock held
    in the run); and the database CPU that rate needs."""
    _, _, rate, gw_us, db_us, table = run
    per_gateway = 1e6 / gw_us if gw_us else 0.0
    bounds = [rate / table.held_fraction(lock) for lock in table.locks
              if table.held_fraction(lock) > 0]
    lock_bound = min(bounds) if bounds else float("inf")
    cells = []
    for n in GATEWAYS_PROJECTED:
        capacity = min(n * per_gateway, lock_bound)
        cells.append(f"{n}: {capacity:,.0f} jobs/s ({capacity * db_us / 1e6:.1f} db cores)")
    bound = "no lock bound" if not bounds else f"locks bound it at {lock_bound:,.0f} jobs/s"
    say(f"    projected: {'; '.join(cells)}")
    say(f"      (N x {per_gateway:,.0f} jobs/s, one gateway at one core: 1 / its CPU per job; "
        f"{bound}; db cores: the rate x PostgreSQL's CPU per job)")
