"""Migrations on PostgreSQL: the same version numbers as SQLite's, frozen as text,
applied once however many gateways start together, refused on a database a newer
leasegate made, and making the schema that postgres/schema.sql shows."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

import leasegate.storage
from leasegate.storage import migrations as sqlite_migrations
from leasegate.storage.migrations import SchemaTooNew
from leasegate.storage.postgres.connection import PgConnection, connect
from leasegate.storage.postgres.migrations import FROZEN, MIGRATIONS, current_version, migrate
from tests import postgres
from tests.test_migrations import assert_released_unchanged, tokens

SCHEMA_SQL = Path(leasegate.storage.__file__).parent / "postgres" / "schema.sql"
LATEST = MIGRATIONS[-1][0]

# A released migration is never edited: a change is a new migration. Once one is
# released (merged), its digest goes here.
RELEASED = {
    12: "a7e979db7a02b577",  # baseline
    13: "646bd6e8f86fcca5",  # sites
    14: "dc8e7becfea931e4",  # periodic runs
    15: "e219c873340e04c1",  # job errors and search
    16: "4436b7730b3acc48",  # site tokens
    18: "c4d0942d40069bd3",  # query retries
    19: "ce99d92dd9ed2576",  # schedules
    20: "b9f9938aef2041c1",  # webhooks
    22: "78ee7ddef13f6c7e",  # key revocation order
    24: "45c9c8c0712f5b32",  # worker channels
    25: "09e05f8aacb47d98",  # job events by time
}


def test_released_migrations_are_never_edited() -> None:
    assert_released_unchanged(MIGRATIONS, RELEASED)  # the digest of each one's text


def test_the_versions_are_sqlites_from_the_baseline_on() -> None:
    """SQLite's 1-12 are PostgreSQL's baseline 12; every later version is on both."""
    numbers = [number for number, _, _ in MIGRATIONS]
    sqlite_numbers = [number for number, _, _ in sqlite_migrations.MIGRATIONS]
    assert numbers[0] == 12
    assert numbers == [n for n in sqlite_numbers if n >= 12]
    listed = {script for _, _, script in MIGRATIONS}
    for script in FROZEN.iterdir():
        assert script.read_text(encoding="utf-8") in listed, f"{script.name} is not listed"


def test_a_fresh_database_is_migrated_once(postgres_url: str) -> None:
    conn = connect(postgres_url)
    assert current_version(conn) == 0
    assert migrate(conn) == [n for n, _, _ in MIGRATIONS]
    assert migrate(conn) == []
    assert current_version(conn) == LATEST
    assert migrate(connect(postgres_url), upto=11) == []  # nothing is older than 12
    conn.close()


def test_gateways_starting_together_migrate_one_after_the_other(postgres_url: str) -> None:
    """Two connections migrate one fresh database at the same moment: the advisory lock
    makes one apply the baseline and the other find it applied."""
    connections = [connect(postgres_url) for _ in range(3)]
    start = threading.Barrier(len(connections))
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def gateway(conn: PgConnection) -> None:
        start.wait()
        try:
            results.append(migrate(conn))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=gateway, args=(conn,)) for conn in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    every = [n for n, _, _ in MIGRATIONS]
    assert sorted(results) == [[], [], every]
    rows = connections[0].execute("SELECT version FROM schema_version").fetchall()
    assert [r[0] for r in rows] == every
    for conn in connections:
        conn.close()


def test_a_database_newer_than_this_leasegate_is_refused(postgres_url: str) -> None:
    conn = connect(postgres_url)
    migrate(conn)
    conn.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)",
                 (LATEST + 1, "from the future"))
    with pytest.raises(SchemaTooNew, match=f"{LATEST + 1} is newer"):
        migrate(conn)
    # the lock was let go: another gateway is refused the same way, not kept waiting
    with pytest.raises(SchemaTooNew):
        migrate(connect(postgres_url))
    conn.close()


# ---- schema.sql --------------------------------------------------------------------

CATALOG = {
    "column": "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, "
              "column_default, is_identity, identity_generation "
              "FROM information_schema.columns WHERE table_schema = current_schema()",
    "constraint": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                  "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace",
    "index": "SELECT tablename, indexname, indexdef FROM pg_indexes "
             "WHERE schemaname = current_schema()",
    "trigger": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) "
               "FROM pg_trigger WHERE NOT tgisinternal",
    "function": "SELECT proname, pg_get_function_arguments(oid), "
                "pg_get_function_result(oid), prosrc FROM pg_proc "
                "WHERE pronamespace = current_schema()::regnamespace",
}


def catalog(conn: PgConnection) -> dict[str, set[tuple[str, ...]]]:
    """Every table's columns, constraints, indexes and triggers, and every function
    (its body without comments and spacing)."""
    return {kind: {tuple(tokens(v) if kind == "function" else str(v) for v in row)
                   for row in conn.execute(sql).fetchall()}
            for kind, sql in CATALOG.items()}


def test_a_freshly_migrated_database_has_the_schema_that_schema_sql_shows(
        postgres_url: str, postgres_server: postgres.Server) -> None:
    migrated = connect(postgres_url)
    migrate(migrated)
    shown_url = postgres_server.create_database()
    try:
        with psycopg.connect(shown_url, autocommit=True) as raw:
            raw.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
        shown = connect(shown_url)
        have, show = catalog(migrated), catalog(shown)
        for kind in CATALOG:
            assert have[kind] - show[kind] == set(), f"schema.sql does not show ({kind})"
            assert show[kind] - have[kind] == set(), f"the migrations do not make ({kind})"
        assert current_version(shown) == current_version(migrated) == LATEST
        shown.close()
    finally:
        postgres_server.drop_database(shown_url)
    migrated.close()


def test_the_comparison_sees_a_changed_schema(postgres_url: str) -> None:
    conn = connect(postgres_url)
    migrate(conn)
    before = catalog(conn)
    conn.execute("ALTER TABLE tasks ALTER COLUMN attempts TYPE integer")
    conn.execute("CREATE OR REPLACE FUNCTION task_lanes_refresh_new() RETURNS trigger "
                 "LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$")
    after = catalog(conn)
    assert before["column"] != after["column"] and before["function"] != after["function"]
    conn.close()
