"""The pool of migrated PostgreSQL databases the tests share (tests/postgres.py): a
database it hands out again is what a new copy of the template is."""

from __future__ import annotations

import psycopg
import pytest

from tests import postgres


def snapshot(url: str) -> tuple[object, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        return (postgres.catalog_digest(conn),
                conn.execute("SELECT * FROM schema_version ORDER BY version").fetchall(),
                conn.execute("SELECT count(*) FROM tasks").fetchone(),
                conn.execute("SELECT count(*) FROM pg_stat_activity "
                             "WHERE datname = current_database()").fetchone(),
                conn.execute("SELECT nextval('api_keys_rowid_seq')").fetchone())


def test_a_database_given_back_comes_back_as_a_new_copy(
        postgres_server: postgres.Server, postgres_template: str) -> None:
    pool = postgres.Pool(postgres_server, postgres_template)
    try:
        first = pool.take()
        new_copy = snapshot(first)
        left = psycopg.connect(first, autocommit=True)  # a session the test leaves open
        left.execute("SELECT pg_advisory_lock(42)")
        left.execute("LISTEN leasegate")
        left.execute("SET work_mem = '8MB'")
        left.execute("INSERT INTO schema_version (version, name) VALUES (99, 'x')")
        left.execute("INSERT INTO api_keys (key_id, secret_hash, role, name, created_at) "
                     "VALUES ('k', 'h', 'admin', 'n', 0)")
        left.execute("BEGIN")
        left.execute("DELETE FROM schema_version")
        pool.give_back(first)
        second = pool.take()
        pool.give_back(pool.take())  # at most two copies: second or third is first reset
        third = pool.take()
        assert first not in (second, third)
        with pytest.raises(psycopg.OperationalError):  # the left session ended with it
            left.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError):  # as if dropped
            psycopg.connect(first, connect_timeout=5).close()
        for url in (second, third):
            assert snapshot(url) == new_copy
            with psycopg.connect(url, autocommit=True) as conn:
                assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                    "AND database = (SELECT oid FROM pg_database WHERE "
                                    "datname = current_database())").fetchone() == (0,)
                assert conn.execute("SHOW work_mem").fetchone() != ("8MB",)
        with psycopg.connect(third, autocommit=True) as conn:  # a changed schema: dropped
            conn.execute("ALTER TABLE tasks ADD COLUMN extra integer")
        pool.give_back(third)
        assert third not in (pool.take(), pool.take())
    finally:
        pool.close()
