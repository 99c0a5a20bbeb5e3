"""The ``leasegate`` command: serve, keys, backup, restore."""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
import time
from pathlib import Path

import trio
from pydantic import ValidationError

from leasegate.settings import SettingsError, load
from leasegate.storage import keys_sql
from leasegate.storage.backup import NotABackup, backup, restore
from leasegate.storage.connection import connect, transaction
from leasegate.storage.datadir import DataDirBusy, DataDirLock, db_path
from leasegate.storage.migrations import migrate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leasegate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the gateway")
    serve.add_argument("--data", type=Path, default=Path("var"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8470)
    serve.add_argument("--config", type=Path, default=None, help="TOML settings file")
    serve.add_argument("--no-bootstrap-keys", action="store_true",
                       help="do not create and print keys on a fresh data directory")
    serve.add_argument("--log-level", default="INFO")

    keys = commands.add_parser("keys", help="manage API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="create a key; prints it last")
    create.add_argument("--role", choices=keys_sql.ROLES, required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--tenant", default=None)
    create.add_argument("--sites", default=None, help="comma-separated sites (worker keys)")
    create.add_argument("--data", type=Path, default=Path("var"))

    back = commands.add_parser("backup", help="a consistent copy of the database")
    back.add_argument("--out", type=Path, required=True)
    back.add_argument("--data", type=Path, default=Path("var"))

    rest = commands.add_parser("restore", help="replace the database with a backup")
    rest.add_argument("file", type=Path)
    rest.add_argument("--data", type=Path, default=Path("var"))
    return parser


def _fail(message: str) -> int:
    print(f"leasegate: {message}", file=sys.stderr)
    return 2


def _create_key(args: argparse.Namespace) -> int:
    from leasegate.http.models import CreateKeyBody  # the API's validation, offline too

    sites = [s.strip() for s in args.sites.split(",")] if args.sites else None
    try:
        body = CreateKeyBody(role=args.role, name=args.name, tenant=args.tenant, sites=sites)
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        return _fail(f"invalid key: {reasons}")
    args.data.mkdir(parents=True, exist_ok=True)
    # Works with or without a server: WAL lets this write beside it.
    conn = connect(db_path(args.data))
    try:
        migrate(conn)
        with transaction(conn):
            key_id, key = keys_sql.create(conn, role=body.role, name=body.name,
                                          tenant=body.tenant, sites=body.sites, now=time.time())
    finally:
        conn.close()
    print(f"created {body.role} key {key_id} ({body.name})")
    print(key)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            settings = load(args.config)
        except SettingsError as exc:
            return _fail(f"settings: {exc}")
        from leasegate.server import serve

        try:
            trio.run(lambda: serve(args.data, settings, args.host, args.port,
                                   bootstrap=not args.no_bootstrap_keys))
        except DataDirBusy as exc:
            return _fail(str(exc))
        except KeyboardInterrupt:
            return 130
        return 0
    try:
        if args.command == "keys":
            return _create_key(args)
        if args.command == "backup":
            if not db_path(args.data).exists():
                return _fail(f"no database in {args.data}")
            size = backup(db_path(args.data), args.out)
            print(f"backed up {size} bytes to {args.out}")
            return 0
        if args.command == "restore":
            with DataDirLock(args.data):
                size = restore(args.file, db_path(args.data))
            print(f"restored {size} bytes into {db_path(args.data)}")
            return 0
    except DataDirBusy as exc:
        return _fail(f"{exc}; stop the server first")
    except (NotABackup, OSError, sqlite3.Error) as exc:
        return _fail(str(exc))
    return _fail(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
