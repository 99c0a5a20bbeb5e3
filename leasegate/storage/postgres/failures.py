"""Which PostgreSQL errors are storage failures: the gateway answers 503 (5030), keeps
serving and reconnects, rather than a 500 for a bug in our SQL.

A storage failure is the server's or the network's state, not our statement's: the
connection was lost or refused, the server is shutting down or out of disk, memory or
connections, a lock was waited on too long, two transactions deadlocked or could not
be serialized, the server is a read-only standby (a failover in progress), or its
files are failing. Anything else (a syntax error, a missing column, a constraint our
SQL broke) is a bug and stays one.
"""

from __future__ import annotations

import psycopg

# Whole SQLSTATE classes.
STORAGE_CLASSES = frozenset({
    "08",  # connection exception
    "40",  # transaction rollback: serialization failure, deadlock detected
    "53",  # insufficient resources: disk full, out of memory, too many connections
    "57",  # operator intervention: admin/crash shutdown, cannot connect now, canceled
    "58",  # system error: I/O error
    "XX",  # internal error: data or index corrupted
})
# Single codes of other classes.
STORAGE_CODES = frozenset({
    "55P03",  # lock_not_available (lock_timeout)
    "25006",  # read_only_sql_transaction (a standby, or a primary demoted)
    "25P03",  # idle_in_transaction_session_timeout ended the session
    "25P04",  # transaction_timeout (PostgreSQL 17)
})


class Unreachable(psycopg.OperationalError):
    """No connection to the server could be made (it is down, refuses us, or the URL
    names a database it does not have); the next call tries again."""


class SchemaChanged(psycopg.OperationalError):
    """Another gateway's migration changed a table under this connection's prepared
    statements (PostgreSQL: "cached plan must not change result type"); the connection
    was closed, and the next call makes a new one."""


def is_postgres_failure(exc: BaseException) -> bool:
    """True for a PostgreSQL error caused by the storage rather than by our SQL."""
    if not isinstance(exc, psycopg.Error):
        return False
    if isinstance(exc, Unreachable):
        return True
    code = exc.sqlstate
    if code is None:
        # Raised by the client, not the server: a connection lost or closed under us
        # is an OperationalError; a misuse of the driver (InterfaceError, ...) is a bug.
        return isinstance(exc, psycopg.OperationalError)
    return code[:2] in STORAGE_CLASSES or code in STORAGE_CODES
