"""Settings: defaults, then a TOML file, then ``LEASEGATE_<NAME>`` variables.

Unknown names and inconsistent sets stop start-up with a message naming the
setting (:class:`SettingsError`); nothing is silently ignored or clamped.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
MiB = 1024 * 1024

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


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
    query_retention: float = 7 * DAY
    # How long a purged task's or query's id stays taken (counted from its purge).
    id_tombstone_retention: float = 400 * DAY
    worker_offline_after: float = 90.0
    # Workers (distinct worker_id) one worker key may have on record; 0: no cap.
    max_workers_per_key: int = 1000
    device_pause_after: float = 90.0
    device_cancel_after: float = 30 * MINUTE
    device_capacity: int = 5000
    ledger_recover_interval: float = 60.0
    ledger_orphan_max_age: float = 5 * HOUR
    ledger_settled_retention: float = 90 * DAY
    # How often the ledger audits its books (a read of the whole journal).
    ledger_audit_interval: float = HOUR
    artifact_orphan_sweep_interval: float = HOUR
    artifact_orphan_max_age: float = 24 * HOUR
    artifact_temp_max_age: float = HOUR
    error_log_window: float = 600.0
    max_body_bytes: int = MiB
    max_json_field_bytes: int = 64 * 1024
    max_artifact_bytes: int = 64 * MiB
    # Token bucket per API key; 0 turns rate limiting off.
    rate_limit_per_second: float = 200.0
    rate_limit_burst: int = 400
    # Token bucket per client address (IPv6: per /64) for what needs a key lookup
    # or no key at all: requests without a key, unknown keys, wrong secrets.
    address_rate_limit_per_second: float = 20.0
    address_rate_limit_burst: int = 100
    sqlite_synchronous: str = "FULL"
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
            "id_tombstone_retention",
            "device_capacity", "ledger_recover_interval", "ledger_audit_interval",
            "artifact_orphan_sweep_interval",
            "error_log_window", "max_body_bytes", "max_json_field_bytes",
            "max_artifact_bytes", "http_read_timeout", "http_body_timeout",
            "housekeeping_interval", "event_ring_size", "event_max_streams",
            "event_keepalive_seconds",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be greater than 0")
        if self.max_wait_seconds > 30:
            raise SettingsError("max_wait_seconds must be at most 30: a longer long-poll "
                                "runs into the idle timeouts of proxies on the way")
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
        if self.drain_seconds > 60:
            raise SettingsError("drain_seconds must be at most 60: shutdown must stay quick")
        if self.device_cancel_after <= self.device_pause_after:
            raise SettingsError("device_cancel_after must be greater than device_pause_after")
        if self.sqlite_synchronous not in SYNCHRONOUS_MODES:
            raise SettingsError(f"sqlite_synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        if self.rate_limit_per_second > 0 and self.rate_limit_burst < 1:
            raise SettingsError("rate_limit_burst must be at least 1 when rate limiting is on")
        if self.address_rate_limit_per_second > 0 and self.address_rate_limit_burst < 1:
            raise SettingsError("address_rate_limit_burst must be at least 1 when address "
                                "rate limiting is on")

    def replace(self, **changes: Any) -> Settings:
        return load(overrides=changes, base=self)


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
