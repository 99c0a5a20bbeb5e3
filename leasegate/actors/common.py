"""Small pieces both job channels share: ids, tokens, fingerprints, pages."""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leasegate.errors import Forbidden, IdempotencyConflict


def canonical_json(value: Any) -> str:
    """One spelling per value, so equal payloads compare equal as text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def fingerprint(*parts: Any) -> str:
    """A digest of a submission or a result, for idempotent replays."""
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


def new_id(prefix: str) -> str:
    """A server-generated id: 96 random bits, never a replay of an existing id."""
    return f"{prefix}-{secrets.token_hex(12)}"


def submit_once(given_id: str | None, prefix: str, digest: str, noun: str,
                insert: Callable[[str], bool],
                get: Callable[[str], sqlite3.Row | None]) -> tuple[str, str | None]:
    """Insert a submission once: ``(id, None)`` when it was created, ``(id, status)``
    for an identical replay of a client-chosen id.

    A different payload under that id is 6004. A generated id that collides
    (96 bits: never) is drawn again, never taken for a replay. The insert comes
    first, so a new submission costs one statement.
    """
    while True:
        job_id = given_id or new_id(prefix)
        if insert(job_id):
            return job_id, None
        if given_id is None:
            continue
        existing = get(job_id)
        assert existing is not None, job_id
        if existing["fingerprint"] != digest:
            raise IdempotencyConflict(f"{noun} {job_id} exists with a different payload")
        return job_id, str(existing["status"])


def new_lease_token() -> str:
    return secrets.token_urlsafe(18)


def check_site(site: str, allowed: tuple[str, ...] | None) -> None:
    """A key limited to some sites may not act on another site's job (403)."""
    if allowed is not None and site not in allowed:
        raise Forbidden(f"this key may not serve site {site}")


class DryFilters:
    """Which ``sites`` filters found no work in this turn.

    Serving parked leases only takes work within a turn, so once a lease for
    some sites found nothing, every later waiter asking for those sites (or a
    subset) would scan the queue in vain. With a backlog behind a blocked lane
    that scan is the expensive part, once per filter instead of once per waiter::

        if dry.known(self.turn, sites): return None
        ... lease ...; if nothing: dry.add(self.turn, sites)
    """

    def __init__(self) -> None:
        self._turn = -1
        self._dry: set[tuple[str, ...] | None] = set()

    def known(self, turn: int, sites: tuple[str, ...] | None) -> bool:
        if turn != self._turn:
            self._turn, self._dry = turn, set()
            return False
        if None in self._dry or sites in self._dry:
            return True
        return sites is not None and all((site,) in self._dry for site in sites)

    def add(self, turn: int, sites: tuple[str, ...] | None) -> None:
        if turn != self._turn:
            self._turn, self._dry = turn, set()
        self._dry.add(sites)
        if sites is not None:
            self._dry.update((site,) for site in sites)


def render_billing(row: sqlite3.Row) -> dict[str, Any] | None:
    """The ``billing`` of a job object. No ledger yet: the hold's state is unknown."""
    if row["max_cost"] is None:
        return None
    return {"max_cost": row["max_cost"], "charged": row["cost"], "refunded": None,
            "hold_status": None}


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class Page:
    """A list request: ``limit`` 1–500, ``offset`` ≥ 0 (validated at the edge)."""

    limit: int = 50
    offset: int = 0


def page_of(conn: sqlite3.Connection, table: str, filters: dict[str, Any], page: Page,
            render: Any) -> dict[str, Any]:
    """``{"items", "total", "limit", "offset"}``, newest first; ``None`` filters are off.

    Filter names are column names chosen by the caller, never by a client.
    """
    where = [f"{column} = ?" for column, value in filters.items() if value is not None]
    args = [value for value in filters.values() if value is not None]
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = conn.execute(f"SELECT count(*) FROM {table}{clause}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM {table}{clause} ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
        [*args, page.limit, page.offset],
    ).fetchall()
    return {"items": [render(r) for r in rows], "total": total,
            "limit": page.limit, "offset": page.offset}
