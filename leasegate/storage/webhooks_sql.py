"""SQL of completion webhooks: endpoints (``webhook_endpoints``) and their deliveries
(``webhook_deliveries``).

The webhooks actor owns both tables, with one exception that is the point of them: a
queue actor inserts the deliveries of a job's terminal transition in the transaction
of that transition (:func:`write_outbox`, an INSERT ... SELECT from the endpoints that
listen), so a crash between the two cannot lose one. From then on only the webhooks
actor touches a delivery: it claims the due ones (on PostgreSQL with ``FOR UPDATE
SKIP LOCKED``; its ``next_attempt_at`` moved past the attempt's lease, so a gateway
that dies mid-attempt leaves it due again for any other), and records each attempt.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

from leasegate.storage.engine import Connection, Row, Spelled

# A delivery's id: "msg_", 16 hex digits of its event, 16 of its endpoint's id.
ENDPOINT_PREFIX: Final = "ep_"
DELIVERY_PREFIX: Final = "msg_"
LISTED: Final = 100  # the deliveries of an endpoint kept once finished, and listed

_OUTBOX: Final = (
    "INSERT INTO webhook_deliveries (delivery_id, endpoint_id, tenant, event_type, channel, "
    "job_id, status, attempts, next_attempt_at, created_at, updated_at) "
    "SELECT 'msg_' || v.column1 || substr(e.endpoint_id, 4), e.endpoint_id, e.tenant, "
    "v.column3, v.column4, v.column5, 'pending', 0, CAST(? AS double precision), "
    "CAST(? AS double precision), CAST(? AS double precision) "
    "FROM (VALUES {values}) AS v JOIN webhook_endpoints AS e "
    "ON e.tenant = v.column2 AND e.disabled = 0 AND e.events LIKE v.column6")


def write_outbox(conn: Connection, at: float,
                 events: Sequence[tuple[str, str, str, str]]) -> int:
    """The deliveries of job events ``(channel, job_id, tenant, event_type)`` that
    happened at ``at``, one per enabled endpoint of the job's tenant listening to it,
    each due at once; how many were written."""
    params: list[object] = [at, at, at]
    for channel, job_id, tenant, event_type in events:
        params += [secrets.token_hex(8), tenant, event_type, channel, job_id,
                   f'%"{event_type}"%']
    return conn.execute(_outbox_sql(len(events)), params).rowcount


@lru_cache(maxsize=64)
def _outbox_sql(count: int) -> str:
    """The outbox statement for ``count`` events (formatted once per count: it runs
    on every terminal transition)."""
    return _OUTBOX.format(values=", ".join(["(?, ?, ?, ?, ?, ?)"] * count))


# ---- endpoints -----------------------------------------------------------------------

def new_secret() -> str:
    """A signing secret as Standard Webhooks spells one: whsec_ and base64 of 24 bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def create_endpoint(conn: Connection, tenant: str, url: str, events: Sequence[str],
                    description: str, now: float) -> str:
    endpoint_id = ENDPOINT_PREFIX + secrets.token_hex(8)
    conn.execute(
        "INSERT INTO webhook_endpoints (endpoint_id, tenant, url, events, description, "
        "secret, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (endpoint_id, tenant, url, json.dumps(list(events)), description, new_secret(),
         now, now))
    return endpoint_id


def count_endpoints(conn: Connection, tenant: str) -> int:
    return int(conn.execute("SELECT count(*) FROM webhook_endpoints WHERE tenant = ?",
                            (tenant,)).fetchone()[0])


def get_endpoint(conn: Connection, endpoint_id: str) -> Row | None:
    row: Row | None = conn.execute("SELECT * FROM webhook_endpoints WHERE endpoint_id = ?",
                                   (endpoint_id,)).fetchone()
    return row


def page_endpoints(conn: Connection, tenant: str | None, limit: int,
                   offset: int) -> tuple[int, list[Row]]:
    """``(total, rows)`` of a tenant's endpoints (None: every tenant's), newest first."""
    where, args = ("WHERE tenant = ?", [tenant]) if tenant is not None else ("", [])
    total = int(conn.execute(f"SELECT count(*) FROM webhook_endpoints {where}",
                             args).fetchone()[0])
    rows = conn.execute(f"SELECT * FROM webhook_endpoints {where} ORDER BY created_at DESC, "
                        "endpoint_id DESC LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    return total, rows


def update_endpoint(conn: Connection, endpoint_id: str, now: float, *, url: str | None,
                    events: Sequence[str] | None, description: str | None,
                    disabled: bool | None) -> None:
    """Change what is given (None: unchanged). Enabling clears the reason and the run of
    failures; disabling by hand leaves no reason."""
    sets, args = ["updated_at = ?"], list[object]([now])
    for column, value in (("url", url), ("description", description),
                          ("events", None if events is None else json.dumps(list(events)))):
        if value is not None:
            sets.append(f"{column} = ?")
            args.append(value)
    if disabled is not None:
        sets += ["disabled = ?", "disabled_reason = NULL", "failing_since = NULL"]
        args.append(int(disabled))
    conn.execute(f"UPDATE webhook_endpoints SET {', '.join(sets)} WHERE endpoint_id = ?",
                 [*args, endpoint_id])


def rotate_secret(conn: Connection, endpoint_id: str, now: float, overlap: float) -> None:
    """A new secret; the current one signs beside it for ``overlap`` seconds."""
    conn.execute("UPDATE webhook_endpoints SET old_secret = secret, secret = ?, "
                 "old_secret_until = ?, updated_at = ? WHERE endpoint_id = ?",
                 (new_secret(), now + overlap, now, endpoint_id))


def delete_endpoint(conn: Connection, endpoint_id: str) -> None:
    conn.execute("DELETE FROM webhook_deliveries WHERE endpoint_id = ?", (endpoint_id,))
    conn.execute("DELETE FROM webhook_endpoints WHERE endpoint_id = ?", (endpoint_id,))


# ---- deliveries ----------------------------------------------------------------------

def page_deliveries(conn: Connection, endpoint_id: str) -> list[Row]:
    """An endpoint's last :data:`LISTED` deliveries, newest first."""
    return conn.execute("SELECT * FROM webhook_deliveries WHERE endpoint_id = ? "
                        "ORDER BY seq DESC LIMIT ?",
                        (endpoint_id, LISTED)).fetchall()


def get_delivery(conn: Connection, endpoint_id: str, delivery_id: str) -> Row | None:
    row: Row | None = conn.execute(
        "SELECT * FROM webhook_deliveries WHERE endpoint_id = ? AND delivery_id = ?",
        (endpoint_id, delivery_id)).fetchone()
    return row


def due_again(conn: Connection, endpoint_id: str, delivery_id: str, now: float) -> bool:
    """Pending, due now (a redelivery asked for; its attempts so far are kept); False:
    the endpoint has no such delivery."""
    return conn.execute(
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?, "
        "lease_owner = NULL, updated_at = ? WHERE endpoint_id = ? AND delivery_id = ?",
        (now, now, endpoint_id, delivery_id)).rowcount == 1


_DUE: Final = Spelled(
    "SELECT d.delivery_id FROM webhook_deliveries AS d JOIN webhook_endpoints AS e "
    "ON e.endpoint_id = d.endpoint_id WHERE d.status = 'pending' AND d.next_attempt_at <= ? "
    "AND e.disabled = 0 ORDER BY d.next_attempt_at LIMIT ?",
    "SELECT d.delivery_id FROM webhook_deliveries AS d JOIN webhook_endpoints AS e "
    "ON e.endpoint_id = d.endpoint_id WHERE d.status = 'pending' AND d.next_attempt_at <= ? "
    "AND e.disabled = 0 ORDER BY d.next_attempt_at LIMIT ? FOR UPDATE OF d SKIP LOCKED")
_CLAIMED: Final = (
    "SELECT d.*, e.url, e.secret, e.old_secret, e.old_secret_until "
    "FROM webhook_deliveries AS d JOIN webhook_endpoints AS e "
    "ON e.endpoint_id = d.endpoint_id WHERE d.delivery_id IN ({ids})")


def claim_due(conn: Connection, gateway: str, now: float, limit: int,
              lease: float) -> list[Row]:
    """Up to ``limit`` deliveries due at ``now`` (of enabled endpoints), each now this
    gateway's until ``now + lease`` (its next attempt moved there: due again for anyone
    if no attempt is recorded by then); with their endpoint's url and secrets."""
    ids = [r[0] for r in conn.execute(_DUE, (now, limit)).fetchall()]
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    conn.execute(f"UPDATE webhook_deliveries SET lease_owner = ?, next_attempt_at = ? "
                 f"WHERE delivery_id IN ({marks})", [gateway, now + lease, *ids])
    return conn.execute(_CLAIMED.format(ids=marks), ids).fetchall()


def next_due(conn: Connection) -> float | None:
    """When the next pending delivery of an enabled endpoint is due (None: none is)."""
    row = conn.execute(
        "SELECT min(d.next_attempt_at) FROM webhook_deliveries AS d JOIN webhook_endpoints "
        "AS e ON e.endpoint_id = d.endpoint_id WHERE d.status = 'pending' "
        "AND e.disabled = 0").fetchone()
    return None if row[0] is None else float(row[0])


def record_attempt(conn: Connection, delivery_id: str, gateway: str, now: float, *,
                   body: str, status: str, next_attempt_at: float | None,
                   status_code: int | None, error: str | None, response: str | None) -> bool:
    """One attempt of a delivery this gateway claimed (False: it is no longer this
    gateway's, e.g. redelivered meanwhile)."""
    cur = conn.execute(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, body = coalesce(body, ?), "
        "status = ?, next_attempt_at = ?, last_status_code = ?, last_error = ?, "
        "last_response = ?, lease_owner = NULL, updated_at = ? "
        "WHERE delivery_id = ? AND lease_owner = ? AND status = 'pending'",
        (body, status, next_attempt_at, status_code, error, response, now, delivery_id,
         gateway))
    return cur.rowcount == 1


def endpoint_failed(conn: Connection, endpoint_id: str, now: float,
                    disable_after: float, reason: str) -> bool:
    """An attempt to the endpoint failed: the run of failures starts now unless under
    way; past ``disable_after`` seconds of it the endpoint is disabled with ``reason``
    (True when this call disabled it)."""
    conn.execute("UPDATE webhook_endpoints SET failing_since = ? WHERE endpoint_id = ? "
                 "AND failing_since IS NULL", (now, endpoint_id))
    cur = conn.execute("UPDATE webhook_endpoints SET disabled = 1, disabled_reason = ?, "
                       "updated_at = ? WHERE endpoint_id = ? AND disabled = 0 "
                       "AND failing_since <= ?",
                       (reason, now, endpoint_id, now - disable_after))
    return cur.rowcount == 1


def endpoint_succeeded(conn: Connection, endpoint_id: str) -> None:
    conn.execute("UPDATE webhook_endpoints SET failing_since = NULL WHERE endpoint_id = ? "
                 "AND failing_since IS NOT NULL", (endpoint_id,))


def drop_over_bound(conn: Connection, bound: int, now: float, reason: str) -> int:
    """Fail the oldest pending deliveries of each endpoint past its newest ``bound``;
    how many."""
    dropped = 0
    for endpoint_id, count in conn.execute(
            "SELECT endpoint_id, count(*) FROM webhook_deliveries WHERE status = 'pending' "
            "GROUP BY endpoint_id HAVING count(*) > ?", (bound,)).fetchall():
        dropped += conn.execute(
            "UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, "
            "lease_owner = NULL, last_error = ?, updated_at = ? WHERE delivery_id IN ("
            "SELECT delivery_id FROM webhook_deliveries WHERE endpoint_id = ? "
            "AND status = 'pending' ORDER BY seq LIMIT ?)",
            (reason, now, endpoint_id, count - bound)).rowcount
    return dropped


def purge_finished(conn: Connection) -> int:
    """Delete the finished deliveries of each endpoint older than its newest
    :data:`LISTED` (a pending one is never deleted); how many."""
    purged = 0
    for (endpoint_id,) in conn.execute(
            "SELECT endpoint_id FROM webhook_deliveries GROUP BY endpoint_id "
            "HAVING count(*) > ?", (LISTED,)).fetchall():
        purged += conn.execute(
            "DELETE FROM webhook_deliveries WHERE endpoint_id = ? AND status <> 'pending' "
            "AND delivery_id NOT IN (SELECT delivery_id FROM webhook_deliveries "
            "WHERE endpoint_id = ? ORDER BY seq DESC LIMIT ?)",
            (endpoint_id, endpoint_id, LISTED)).rowcount
    return purged
