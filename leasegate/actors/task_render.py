"""Rows of the tasks and workers tables as the objects of API.md."""

from __future__ import annotations

import sqlite3
from typing import Any

from leasegate.actors.common import loads, render_billing
from leasegate.clock import iso


def render(row: sqlite3.Row) -> dict[str, Any]:
    """The task object of API.md, plus ``late_result`` (a stale task's last lease reported)."""
    error = None
    if row["error_code"] is not None or row["error_message"] is not None:
        error = {"code": row["error_code"], "message": row["error_message"] or ""}
    reclaim = None
    if row["reclaim_action"] is not None:
        reclaim = {"action": row["reclaim_action"], "reason": row["reclaim_reason"],
                   "by": row["reclaim_by"], "at": iso(row["reclaim_at"])}
    return {
        "task_id": row["task_id"],
        "tenant": row["tenant"],
        "site": row["site"],
        "account": row["account"],
        "kind": row["kind"],
        "params": loads(row["params"]),
        "priority": row["priority"],
        "status": row["status"],
        "device_id": row["device_id"],
        "batch_total": row["batch_total"],
        "progress": loads(row["progress"]),
        "lease_owner": row["lease_owner"],
        "lease_expires_at": iso(lease_expiry(row)),
        "attempts": row["attempts"],
        "cancel_requested": bool(row["cancel_requested"]),
        "pause_requested": bool(row["pause_requested"]),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
        "started_at": iso(row["started_at"]),
        "completed_at": iso(row["completed_at"]),
        "result": loads(row["result"]),
        "error": error,
        "stale_reason": row["stale_reason"],
        "reclaim": reclaim,
        "billing": render_billing(row),
        "late_result": bool(row["late_result"]),
    }


def lease_expiry(row: sqlite3.Row) -> float | None:
    """The running lease's expiry, or the claim's while leased; None otherwise."""
    if row["status"] == "running":
        value: float | None = row["lease_expires_at"]
        return value
    if row["status"] == "leased":
        claim: float | None = row["claim_expires_at"]
        return claim
    return None


def render_lease(row: sqlite3.Row) -> dict[str, Any]:
    """A lease as handed to a worker: a claim to be started before ``claim_expires_at``."""
    return {
        "task_id": row["task_id"],
        "site": row["site"],
        "account": row["account"],
        "kind": row["kind"],
        "params": loads(row["params"]),
        "progress": loads(row["progress"]),
        "attempt": row["attempts"] + 1,
        "lease_token": row["lease_token"],
        "claim_expires_at": iso(row["claim_expires_at"]),
    }


def render_worker(row: sqlite3.Row, task_ids: list[str], online: bool) -> dict[str, Any]:
    return {
        "worker_id": row["worker_id"],
        "state": "online" if online else "offline",
        "last_seen_at": iso(row["last_seen_at"]),
        "task_ids": task_ids,
        "sites": loads(row["sites"]),
    }
