"""Settings: defaults, then a TOML file, then ``LEASEGATE_<NAME>`` variables.

Unknown names and inconsistent sets stop start-up with a message naming the
setting (:class:`SettingsError`); nothing is silently ignored or clamped.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
MiB = 1024 * 1024

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
POSTGRES_SCHEMES = ("postgresql", "postgres")

# The ledger's hard ceilings, in minor units; the settings below may only lower them.
# One amount (a credit, a max_cost, a cost): exact in a JSON double, so every client
# reads it as sent. A balance: every balance lies within +-ledger_max_balance (see
# Settings.ledger_max_balance), and so does every partial sum of balances, so any
# ceiling below 2**63 keeps all of them in SQLite's 64-bit integers; 2**62 is a round
# one with a margin.
MAX_AMOUNT = 2**53
MAX_BALANCE = 2**62
MAX_QUERY_ATTEMPTS = 100  # a query's max_attempts, per submit or by default


class SettingsError(ValueError):
    """A setting is unknown, malformed or inconsistent; the message names it."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every tunable. Durations are seconds."""

    max_wait_seconds: float = 30.0
    task_claim_window: float = 30.0
    task_lease_ttl: float = 120.0
    task_hard_timeout: float = 4 * HOUR
    task_ttl: float = 24 * HOUR
    task_retention: float = 7 * DAY
    query_lease_ttl: float = 60.0
    query_ttl: float = 600.0
    query_max_attempts: int = 3
    # A failed query waits min(base * 2**(attempt - 1), max) seconds, +-20%, before
    # its next attempt.
    query_retry_base_seconds: float = 2.0
    query_retry_max_seconds: float = 600.0
    query_retention: float = 7 * DAY
    # How long a purged task's or query's id stays taken (counted from its purge).
    id_tombstone_retention: float = 400 * DAY
    worker_offline_after: float = 90.0
    # Workers (distinct worker_id) one worker key may have on record; 0: no cap.
    max_workers_per_key: int = 1000
    device_pause_after: float = 90.0
    device_cancel_after: float = 30 * MINUTE
    device_capacity: int = 5000
    # Recurring schedules one tenant may have (a PUT of one more is 409, state_conflict).
    max_schedules_per_tenant: int = 100
    ledger_recover_interval: float = 60.0
    ledger_orphan_max_age: float = 5 * HOUR
    ledger_settled_retention: float = 90 * DAY
    # How often the ledger audits its books (a read of the whole journal).
    ledger_audit_interval: float = HOUR
    # The most one credit or one max_cost may be (minor units).
    ledger_max_amount: int = MAX_AMOUNT
    # The most any account may hold, @world included. Money enters only by a credit
    # (@world -> tenant), and every transaction sums to zero, so @world's balance is
    # minus every credit ever made and the positive balances (tenants, @holds,
    # @revenue) add up to exactly that. A credit that would take @world past
    # -ledger_max_balance is refused: then every balance, and every sum of balances
    # taken in any order, lies within +-ledger_max_balance <= MAX_BALANCE < 2**63.
    # The default keeps every balance exact in a JSON double too.
    ledger_max_balance: int = MAX_AMOUNT
    artifact_orphan_sweep_interval: float = HOUR
    artifact_orphan_max_age: float = 24 * HOUR
    artifact_temp_max_age: float = HOUR
    error_log_window: float = 600.0
    max_body_bytes: int = MiB
    max_json_field_bytes: int = 64 * 1024
    max_artifact_bytes: int = 64 * MiB
    # Per task: how many artifacts (distinct names) and how many bytes in all; a
    # re-upload under a name replaces that artifact and counts once.
    max_artifacts_per_task: int = 100
    max_artifact_bytes_per_task: int = 256 * MiB
    # Artifact uploads being received at once, per worker key and in all (each holds a
    # staging file and a stream to disk): 429 past them; 0: no bound.
    max_uploads_per_key: int = 4
    max_uploads: int = 16
    # Token bucket per API key; 0 turns rate limiting off.
    rate_limit_per_second: float = 200.0
    rate_limit_burst: int = 400
    # Token bucket per client address (IPv6: per /64) for what needs a key lookup
    # or no key at all: requests without a key, unknown keys, wrong secrets.
    address_rate_limit_per_second: float = 20.0
    address_rate_limit_burst: int = 100
    sqlite_synchronous: str = "FULL"
    # true, with FULL or EXTRA: SQLite commits without syncing and the gateway syncs the
    # WAL off the write lock before answering, so the next turn applies meanwhile (still
    # durable before acknowledged). Off until bench/commit_pipeline.py shows it pays;
    # so far it has not (README, Durability).
    sqlite_commit_pipeline: bool = False
    # Serve on storage that cannot keep "durable before acknowledged" (e.g.
    # sqlite_synchronous OFF or NORMAL); refused at start without it.
    unsafe_durability: bool = False
    # Unset: the SQLite file in the data directory. A postgresql:// URL: that PostgreSQL
    # database (kept out of repr: a URL may carry a password).
    database_url: str | None = dataclasses.field(default=None, repr=False)
    # serve on PostgreSQL: how long to wait at start for the database to accept a
    # connection (a supervisor often starts the gateway before its database).
    database_connect_timeout: float = 60.0
    # This gateway's name among those of one database (/health, who ran a periodic job);
    # unset: <hostname>:<port> (serve), <hostname>:<pid> otherwise.
    gateway: str | None = None
    # PostgreSQL: how often each queue (tasks, queries, devices) takes a turn when
    # nothing else makes it, to meet the deadlines other gateways' turns set (the claim
    # window of a gateway that died).
    deadline_poll_interval: float = 1.0
    # SQLite: how often the gateway looks for keys revoked by another process
    # (leasegate keys revoke), to refuse them and end their long-polls and event
    # streams. PostgreSQL needs no look: each revocation is notified to every gateway.
    key_revocation_poll_interval: float = 0.5
    # Where artifact files live; unset: <data>/artifacts. Several gateways on one
    # PostgreSQL database must all mount the same directory here.
    artifacts_dir: str | None = None
    # How often retention purges and bucket sweeps run.
    housekeeping_interval: float = 60.0
    # How long an idle or slow socket may hold a read.
    http_read_timeout: float = 60.0
    # How long a request body may take to arrive in full (408 past it). A body
    # that stops altogether for http_read_timeout is cut first, without an answer,
    # so this is best below it (not enforced: lowering the read timeout alone must
    # stay possible).
    http_body_timeout: float = 20.0
    # Serve /metrics without an admin key (for a scraper on a private network).
    metrics_public: bool = False
    # On SIGINT/SIGTERM, how long every request is still answered (503) before
    # the server stops accepting connections.
    drain_seconds: float = 2.0
    # Live job events (GET /v1/events): how many recent events are kept for
    # readers to catch up and resume from, how many streams may be open at once,
    # and how often an idle stream gets a keep-alive comment.
    event_ring_size: int = 10_000
    event_max_streams: int = 1000
    event_keepalive_seconds: float = 15.0
    # What one caller may hold open; 0: no bound. Parked long-polls (lease polls and
    # GETs with wait_seconds, live event streams) per API key and per client address
    # (IPv6: per /64): 429 past them. Open connections per client address, and in
    # all (0: derived from the file-descriptor limit): closed at accept past them.
    max_parked_per_key: int = 1000
    max_parked_per_address: int = 2000
    max_connections_per_address: int = 2000
    max_connections: int = 0
    # Completion webhooks. Private: also http:// URLs and loopback, private and
    # link-local addresses (tests, a lab), refused otherwise. Bounds: endpoints per
    # tenant; pending deliveries per endpoint (past it the oldest are failed, counted in
    # /metrics); deliveries in flight from this gateway. Each retry's delay varies by
    # +-webhook_retry_jitter of itself.
    webhook_allow_private: bool = False
    webhook_max_endpoints: int = 20
    webhook_max_pending: int = 10_000
    webhook_max_in_flight: int = 16
    webhook_timeout: float = 10.0
    webhook_retry_jitter: float = 0.1

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise SettingsError(f"{field.name} must be a finite number (got {value})")
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
                raise SettingsError(f"{field.name} must not be negative (got {value})")
        positive = (
            "max_wait_seconds", "task_claim_window", "task_lease_ttl", "task_hard_timeout",
            "task_ttl", "query_lease_ttl", "query_ttl", "query_max_attempts",
            "query_retry_base_seconds", "query_retry_max_seconds",
            "id_tombstone_retention",
            "device_capacity", "ledger_recover_interval", "ledger_audit_interval",
            "artifact_orphan_sweep_interval",
            "error_log_window", "max_body_bytes", "max_json_field_bytes",
            "max_artifact_bytes", "max_artifacts_per_task", "max_artifact_bytes_per_task",
            "http_read_timeout", "http_body_timeout",
            "housekeeping_interval", "event_ring_size", "event_max_streams",
            "deadline_poll_interval", "key_revocation_poll_interval",
            "event_keepalive_seconds",
            "webhook_max_endpoints", "webhook_max_pending", "webhook_max_in_flight",
            "webhook_timeout",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be greater than 0")
        if self.max_wait_seconds > 30:
            raise SettingsError("max_wait_seconds must be at most 30: a longer long-poll "
                                "runs into the idle timeouts of proxies on the way")
        if self.query_max_attempts > MAX_QUERY_ATTEMPTS:
            raise SettingsError(f"query_max_attempts must be at most {MAX_QUERY_ATTEMPTS} "
                                "(as a submit's max_attempts)")
        if self.query_retry_max_seconds < self.query_retry_base_seconds:
            raise SettingsError(
                f"query_retry_max_seconds ({self.query_retry_max_seconds}) must be at least "
                f"query_retry_base_seconds ({self.query_retry_base_seconds})")
        if self.ledger_orphan_max_age <= self.task_hard_timeout:
            raise SettingsError(
                "ledger_orphan_max_age must be greater than task_hard_timeout "
                f"({self.ledger_orphan_max_age} <= {self.task_hard_timeout}): a hold would be "
                "refunded while its task may still be running"
            )
        if self.http_read_timeout <= self.max_wait_seconds:
            # hypercorn's read timeout also runs while a request is in flight:
            # it would cut every long-poll short.
            raise SettingsError(
                f"http_read_timeout ({self.http_read_timeout}) must be greater than "
                f"max_wait_seconds ({self.max_wait_seconds}): it would cut long-polls short"
            )
        if self.webhook_retry_jitter >= 1:
            raise SettingsError("webhook_retry_jitter must be below 1 (a fraction of each delay)")
        if self.drain_seconds > 60:
            raise SettingsError("drain_seconds must be at most 60: shutdown must stay quick")
        self._check_ledger_bounds()
        self._check_artifact_limits()
        if self.device_cancel_after <= self.device_pause_after:
            raise SettingsError("device_cancel_after must be greater than device_pause_after")
        check_database_url(self.database_url)
        if not 0 <= self.database_connect_timeout <= DAY:
            raise SettingsError("database_connect_timeout must be 0 to 86400 seconds")
        if self.gateway is not None and not (0 < len(self.gateway) <= 128
                                             and self.gateway.isprintable()):
            raise SettingsError("gateway must be 1 to 128 printable characters")
        if self.sqlite_synchronous not in SYNCHRONOUS_MODES:
            raise SettingsError(f"sqlite_synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        if self.rate_limit_per_second > 0 and self.rate_limit_burst < 1:
            raise SettingsError("rate_limit_burst must be at least 1 when rate limiting is on")
        if self.address_rate_limit_per_second > 0 and self.address_rate_limit_burst < 1:
            raise SettingsError("address_rate_limit_burst must be at least 1 when address "
                                "rate limiting is on")

    def _check_ledger_bounds(self) -> None:
        if not 1 <= self.ledger_max_amount <= MAX_AMOUNT:
            raise SettingsError(f"ledger_max_amount must be 1 to {MAX_AMOUNT} (2**53: exact "
                                f"in JSON); got {self.ledger_max_amount}")
        if not self.ledger_max_amount <= self.ledger_max_balance <= MAX_BALANCE:
            raise SettingsError(
                f"ledger_max_balance must be ledger_max_amount ({self.ledger_max_amount}) "
                f"to {MAX_BALANCE} (2**62: no sum of balances can leave 64-bit integers); "
                f"got {self.ledger_max_balance}")
    def _check_artifact_limits(self) -> None:
        if self.max_artifact_bytes_per_task < self.max_artifact_bytes:
            raise SettingsError(
                f"max_artifact_bytes_per_task ({self.max_artifact_bytes_per_task}) must be at "
                f"least max_artifact_bytes ({self.max_artifact_bytes}): a task could not keep "
                "one artifact of the largest size")

    def replace(self, **changes: Any) -> Settings:
        return load(overrides=changes, base=self)


def check_database_url(url: str | None) -> None:
    """None, or a PostgreSQL URL; the message never repeats the URL (its password)."""
    if url is None:
        return
    scheme, found, _ = url.partition("://")
    if not found or scheme not in POSTGRES_SCHEMES:  # libpq reads these two, lowercase
        named = (f"a {scheme!r} URL" if found and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme)
                 else "no URL scheme")
        raise SettingsError(
            "database_url must be a postgresql:// (or postgres://) URL, or unset for the "
            f"SQLite file in the data directory (got {named})")


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def _coerce(name: str, raw: Any) -> Any:
    kind = _FIELDS[name].type
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError(raw)
            return int(raw)
        if kind == "float":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return float(raw)
        if kind == "str | None":  # a URL, a name, a path: as written; empty is unset
            return None if raw is None else (str(raw).strip() or None)
        return str(raw).strip().upper()
    except (TypeError, ValueError):
        raise SettingsError(f"{name}: cannot read {raw!r} as {kind}") from None


def load(
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    base: Settings | None = None,
) -> Settings:
    """Build settings from defaults < TOML file < environment < overrides."""
    values: dict[str, Any] = dataclasses.asdict(base) if base else {}
    if config_file is not None:
        try:
            document = tomllib.loads(Path(config_file).read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"config file {config_file}: {exc}") from None
        # Accept both a flat file and one with a [leasegate] table.
        section = document.get("leasegate", document)
        for name, raw in section.items():
            if name not in _FIELDS:
                raise SettingsError(f"unknown setting {name!r} in {config_file}")
            values[name] = _coerce(name, raw)
    env = os.environ if environ is None else environ
    for key, raw in env.items():
        if not key.startswith("LEASEGATE_"):
            continue
        name = key.removeprefix("LEASEGATE_").lower()
        if name not in _FIELDS:
            raise SettingsError(f"unknown setting {name!r} (environment variable {key})")
        values[name] = _coerce(name, raw)
    for name, raw in (overrides or {}).items():
        if name not in _FIELDS:
            raise SettingsError(f"unknown setting {name!r}")
        values[name] = _coerce(name, raw)
    return Settings(**values)
