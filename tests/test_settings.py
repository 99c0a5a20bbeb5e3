"""Settings: defaults < TOML < environment; bad sets stop start-up naming the setting."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from leasegate.settings import Settings, SettingsError, load


def test_defaults_match_the_design() -> None:
    s = load(environ={})
    assert (s.task_claim_window, s.task_lease_ttl, s.task_hard_timeout) == (30, 120, 4 * 3600)
    assert (s.query_lease_ttl, s.query_ttl, s.query_max_attempts) == (60, 600, 3)
    assert (s.query_retry_base_seconds, s.query_retry_max_seconds) == (2, 600)
    assert (s.device_capacity, s.ledger_orphan_max_age, s.sqlite_synchronous) == (
        5000, 5 * 3600, "FULL")
    assert s.id_tombstone_retention == 400 * 86400  # an upstream's retries are long over
    # Every amount, and every balance, exact in a JSON double.
    assert (s.ledger_max_amount, s.ledger_max_balance) == (2**53, 2**53)


def test_every_setting_is_in_the_readme_table() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", readme, re.MULTILINE))
    missing = [f.name for f in dataclasses.fields(Settings) if f.name not in rows]
    assert not missing, missing


def test_precedence(tmp_path: Path) -> None:
    config = tmp_path / "leasegate.toml"
    config.write_text("query_lease_ttl = 5\nquery_ttl = 100\n")
    s = load(config, environ={"LEASEGATE_QUERY_LEASE_TTL": "2"})
    assert (s.query_lease_ttl, s.query_ttl) == (2, 100)


@pytest.mark.parametrize(("env", "named"), [
    ({"LEASEGATE_NO_SUCH_THING": "1"}, "no_such_thing"),
    ({"LEASEGATE_QUERY_TTL": "soon"}, "query_ttl"),
    ({"LEASEGATE_LEDGER_ORPHAN_MAX_AGE": "3600"}, "ledger_orphan_max_age"),
    ({"LEASEGATE_SQLITE_SYNCHRONOUS": "sometimes"}, "sqlite_synchronous"),
    ({"LEASEGATE_QUERY_MAX_ATTEMPTS": "0"}, "query_max_attempts"),
    ({"LEASEGATE_QUERY_MAX_ATTEMPTS": "101"}, "query_max_attempts"),
    ({"LEASEGATE_QUERY_RETRY_BASE_SECONDS": "0"}, "query_retry_base_seconds"),
    ({"LEASEGATE_QUERY_RETRY_MAX_SECONDS": "1"}, "query_retry_max_seconds"),
    ({"LEASEGATE_QUERY_RETRY_MAX_SECONDS": "later"}, "query_retry_max_seconds"),
    ({"LEASEGATE_ID_TOMBSTONE_RETENTION": "0"}, "id_tombstone_retention"),
    ({"LEASEGATE_MAX_WAIT_SECONDS": "31"}, "max_wait_seconds"),
    ({"LEASEGATE_HTTP_READ_TIMEOUT": "30"}, "http_read_timeout"),
    ({"LEASEGATE_TASK_TTL": "nan"}, "task_ttl"),
    ({"LEASEGATE_QUERY_TTL": "inf"}, "query_ttl"),
    ({"LEASEGATE_LEDGER_MAX_AMOUNT": "0"}, "ledger_max_amount"),
    ({"LEASEGATE_LEDGER_MAX_AMOUNT": str(2**53 + 1)}, "ledger_max_amount"),
    ({"LEASEGATE_LEDGER_MAX_AMOUNT": "100", "LEASEGATE_LEDGER_MAX_BALANCE": "99"},
     "ledger_max_balance"),
    ({"LEASEGATE_LEDGER_MAX_BALANCE": str(2**62 + 1)}, "ledger_max_balance"),
    ({"LEASEGATE_MAX_ARTIFACT_BYTES_PER_TASK": "1048576"}, "max_artifact_bytes_per_task"),
    ({"LEASEGATE_MAX_ARTIFACTS_PER_TASK": "0"}, "max_artifacts_per_task"),
])
def test_bad_settings_name_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        load(environ=env)


def test_unknown_name_in_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[leasegate]\nquery_tll = 5\n")
    with pytest.raises(SettingsError, match="query_tll"):
        load(config, environ={})


def test_the_database_is_the_sqlite_file_unless_a_postgresql_url_is_given(
        tmp_path: Path) -> None:
    assert load(environ={}).database_url is None
    assert load(environ={"LEASEGATE_DATABASE_URL": " "}).database_url is None
    for url in ("postgresql://u@db.internal:5432/leasegate?sslmode=require",
                "postgres://u@db/leasegate"):
        assert load(environ={"LEASEGATE_DATABASE_URL": url}).database_url == url  # as written
    config = tmp_path / "c.toml"
    config.write_text('database_url = "postgresql://u@db/leasegate"\n')
    assert load(config, environ={}).database_url == "postgresql://u@db/leasegate"


@pytest.mark.parametrize("url", ["mysql://u:s3cret@db/x", "sqlite:///var/leasegate.db",
                                 "var/leasegate.db", "postgresql:/db"])
def test_another_database_url_is_refused_without_repeating_it(url: str) -> None:
    with pytest.raises(SettingsError, match="database_url must be a postgresql://") as refused:
        load(environ={"LEASEGATE_DATABASE_URL": url})
    assert "s3cret" not in str(refused.value) and url not in str(refused.value)
