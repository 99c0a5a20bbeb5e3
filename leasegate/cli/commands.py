"""The leasegate command: serve the gateway; look at and act on its tasks, queries,
sites, workers, schedules and webhooks; manage keys; back up and restore the database.

  leasegate serve                     serve the gateway (the SQLite file in ./var)
  leasegate tasks|queries list|show   look at jobs (a table, or --json)
  leasegate tasks cancel|pause|resume|reclaim|reclaim-stale|retry|redrive
  leasegate queries retry|redrive
  leasegate sites list|pause|resume|throttle
  leasegate workers                   the workers seen, what they serve and hold
  leasegate schedules list|show|put|pause|resume|trigger|delete
  leasegate webhooks list|create|delete|deliveries|retry
  leasegate keys create|list|revoke   API keys
  leasegate backup|restore            a consistent copy of the database, and back

Commands on a running gateway take --url (default $LEASEGATE_URL or
http://127.0.0.1:8470) and --key (default $LEASEGATE_ADMIN_KEY, an admin key).

Every command that opens the database takes --database URL (or the environment's
LEASEGATE_DATABASE_URL) for a PostgreSQL database; without, the SQLite file in --data.

Exit status: 0 done; 1 it could not be done (port in use, data directory not
writable or in use, no database, not a backup, storage not durable); 2 a usage error (bad
arguments or settings); 130 (128 + signal number) when stopped by a second
SIGINT/SIGTERM, or a first one before the server was up.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import trio
from pydantic import ValidationError

from leasegate.cli import actions as cli_actions
from leasegate.cli import schedules as cli_schedules
from leasegate.cli import webhooks as cli_webhooks
from leasegate.cli.inspect import add_commands as add_inspect_commands
from leasegate.cli.inspect import subcommands, with_keys
from leasegate.cli.table import CommandFailed, UsageError
from leasegate.settings import SettingsError, check_database_url, load
from leasegate.storage import keys_sql
from leasegate.storage.backup import NotABackup, backup, restore
from leasegate.storage.connection import is_storage_failure
from leasegate.storage.datadir import (
    DataDirBusy,
    DataDirLock,
    DataDirUnusable,
    NoDatabase,
    db_path,
    first_missing,
    remove_unused,
    require_database,
)
from leasegate.storage.durability import StorageNotDurable
from leasegate.storage.engine import Connection

USAGE_ERROR = 2
FAILED = 1
DATA_HELP = "data directory, holding leasegate.db (default: %(default)s)"
DATABASE_HELP = ("a postgresql:// URL: use that PostgreSQL database instead of the SQLite "
                 "file in the data directory (default: the environment's "
                 "LEASEGATE_DATABASE_URL, else SQLite)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leasegate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_command(commands)
    _key_commands(commands)
    add_inspect_commands(commands, _data_options)
    _backup_commands(commands)
    _job_commands(commands)
    return parser


def _serve_command(commands: cli_actions.Subcommands) -> None:
    serve = commands.add_parser(
        "serve", help="serve the gateway",
        description="Serve the gateway until SIGINT/SIGTERM. On a fresh data directory, "
                    "print one key per role once. Settings come from --config and "
                    "LEASEGATE_<NAME> environment variables.")
    serve.add_argument("--data", type=Path, default=Path("var"),
                       help=f"{DATA_HELP}; created if missing")
    serve.add_argument("--database", metavar="URL", default=None, help=DATABASE_HELP)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8470,
                       help="TCP port to listen on (default: %(default)s)")
    serve.add_argument("--config", type=Path, default=None,
                       help="TOML settings file, flat or under [leasegate] (default: none; "
                            "the environment's LEASEGATE_<NAME> variables override it)")
    serve.add_argument("--no-bootstrap-keys", action="store_true",
                       help="do not create and print keys on a fresh data directory")
    serve.add_argument("--allow-unbalanced", action="store_true",
                       help="serve even if the start-up ledger audit fails (it is still "
                            "logged, and shown in /health and /metrics)")
    serve.add_argument("--unsafe-durability", action="store_true",
                       help="serve even if a setting lets a power cut lose acknowledged "
                            "writes (sqlite_synchronous OFF or NORMAL); logged at every "
                            "start, and shown in /health and /metrics (the setting "
                            "unsafe_durability does the same)")
    serve.add_argument("--log-level", default="INFO",
                       choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper,
                       help="log level; logs go to stderr (default: %(default)s)")


def _key_commands(commands: cli_actions.Subcommands) -> None:
    keys = commands.add_parser("keys", help="manage API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    create = key_commands.add_parser(
        "create", help="create a key; prints it last",
        description="Create a key in an existing database (with the server running or "
                    "not); the key is the last line printed.")
    create.add_argument("--role", choices=keys_sql.ROLES, required=True, help="the key's role")
    create.add_argument("--name", required=True, help="a label for people (1-128 characters)")
    create.add_argument("--tenant", default=None, help="tenant (required for client keys)")
    create.add_argument("--sites", default=None,
                        help="comma-separated sites the key may lease (worker keys only; "
                             "default: all)")
    create.add_argument("--data", type=Path, default=Path("var"), help=DATA_HELP)
    create.add_argument("--database", metavar="URL", default=None, help=DATABASE_HELP)


def _backup_commands(commands: cli_actions.Subcommands) -> None:
    back = commands.add_parser(
        "backup", help="a consistent copy of the database",
        description="Write a consistent copy of the database (safe while serving).")
    back.add_argument("--out", type=Path, required=True,
                      help="file to write (not one that exists, unless --force)")
    back.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    back.add_argument("--data", type=Path, default=Path("var"), help=DATA_HELP)
    back.add_argument("--database", metavar="URL", default=None,
                      help="a postgresql:// URL (or LEASEGATE_DATABASE_URL): refused, "
                           "PostgreSQL is backed up with pg_dump")

    rest = commands.add_parser(
        "restore", help="replace the database with a backup",
        description="Replace the database with a checked copy of a backup "
                    "(refused while a server holds the data directory).")
    rest.add_argument("file", type=Path, help="a file written by backup")
    rest.add_argument("--data", type=Path, default=Path("var"), help=DATA_HELP)
    rest.add_argument("--database", metavar="URL", default=None,
                      help="a postgresql:// URL (or LEASEGATE_DATABASE_URL): refused, "
                           "PostgreSQL is restored with pg_restore")


def _job_commands(commands: cli_actions.Subcommands) -> None:
    """The operator's commands on a running gateway: ``cli.actions``' in the ``tasks``,
    ``queries`` and ``sites`` groups beside ``cli.inspect``'s, and the ``schedules`` and
    ``webhooks`` groups."""
    def group(name: str, what: str) -> cli_actions.Subcommands:
        made: cli_actions.Subcommands = subcommands(commands, name,
                                                    f"{what} on a running gateway")
        return made

    for module in (cli_actions, cli_schedules, cli_webhooks):
        module.register(group)


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=Path("var"), help=DATA_HELP)
    parser.add_argument("--database", metavar="URL", default=None,
                        help="a postgresql:// URL: that database instead of the SQLite file "
                             "in --data (default: the environment's LEASEGATE_DATABASE_URL)")


def _fail(message: str, status: int = FAILED) -> int:
    message = " ".join(message.split())  # one line (libpq's messages have several)
    print(f"leasegate: {message}", file=sys.stderr)
    return status


POSTGRES_BACKUP = ("the database is PostgreSQL: back it up with pg_dump (e.g. pg_dump "
                   "--format=custom --file=leasegate.dump DBNAME) and restore it with "
                   "pg_restore; leasegate {command} copies SQLite files only")


def _database_url(args: argparse.Namespace) -> str | None:
    """``--database``, else ``LEASEGATE_DATABASE_URL``, else None (SQLite); raises
    SettingsError for what is not a PostgreSQL URL."""
    url = (args.database or os.environ.get("LEASEGATE_DATABASE_URL", "")).strip() or None
    check_database_url(url)
    return url


def _create_key(args: argparse.Namespace) -> int:
    from leasegate.actors.keys.records import CreateKey, sites_typed
    from leasegate.errors import InvalidRequest
    from leasegate.http.models.jobs import CreateKeyBody  # the API's validation, offline too

    try:
        sites = sites_typed(args.sites)
        body = CreateKeyBody(role=args.role, name=args.name, tenant=args.tenant,
                             sites=None if sites is None else list(sites))
        # And the keys actor's own rules (a tenant is never a system account).
        CreateKey(body.role, body.name, body.tenant, sites).check()
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        return _fail(f"invalid key: {reasons}", USAGE_ERROR)
    except InvalidRequest as exc:
        return _fail(f"invalid key: {exc.message}", USAGE_ERROR)
    def create(conn: Connection) -> tuple[str, str]:
        return keys_sql.create(conn, role=body.role, name=body.name, tenant=body.tenant,
                               sites=body.sites, now=time.time())

    key_id, key = with_keys(args, create)
    print(f"created {body.role} key {key_id} ({body.name})")
    print(key)
    return 0


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception in ``group``, however deep the nurseries nested it."""
    first = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load(args.config)
        if args.unsafe_durability:
            settings = settings.replace(unsafe_durability=True)
        if args.database:
            settings = settings.replace(database_url=args.database)
    except SettingsError as exc:
        return _fail(f"settings: {exc}", USAGE_ERROR)
    from leasegate.actors.ledger.audit import LedgerUnbalanced
    from leasegate.server import Interrupted, StartupError, serve
    from leasegate.storage.postgres.failures import Unreachable

    status, message = 0, ""
    made = first_missing(args.data)  # what serve creates, removed again if it cannot serve
    try:
        trio.run(lambda: serve(args.data, settings, args.host, args.port,
                               bootstrap=not args.no_bootstrap_keys,
                               allow_unbalanced=args.allow_unbalanced))
    # trio wraps what ends a nursery in exception groups; one line each, no traceback.
    except* (StartupError, DataDirBusy, DataDirUnusable, LedgerUnbalanced,
             StorageNotDurable, Unreachable) as group:
        status, message = FAILED, str(_first(group))
        if isinstance(_first(group), StartupError):  # nothing was served: nothing left
            remove_unused(args.data, made)
    except* KeyboardInterrupt:
        status, message = 128 + signal.SIGINT, "interrupted"
    except* Interrupted as group:
        signum = getattr(_first(group), "signum", signal.SIGINT)
        status = 128 + signum
        message = f"second {signal.Signals(signum).name}: stopped without finishing the drain"
    except* Exception as group:
        # Only a failure outside message handling gets here (an actor's database
        # gone, say): the traceback goes to the log, the reason to one last line.
        first = _first(group)
        logging.getLogger("leasegate.server").critical("stopped by a failure", exc_info=group)
        status, message = FAILED, f"stopped: {type(first).__name__}: {first}"
    return _fail(message, status) if status else 0


def _run(args: argparse.Namespace) -> int:
    try:
        status: int = args.run(args)
        return status
    except UsageError as exc:
        return _fail(str(exc), USAGE_ERROR)
    except CommandFailed as exc:
        return _fail(str(exc))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if getattr(args, "handler", None) is not None:  # a command on a running gateway
        return cli_actions.run(args)
    try:
        if getattr(args, "run", None) is not None:  # a command of cli.inspect
            return _run(args)
        if args.command == "keys":
            return _create_key(args)
        if _database_url(args) is not None:  # backup, restore
            return _fail(POSTGRES_BACKUP.format(command=args.command))
        if args.command == "backup":
            if args.out.exists() and not args.force:
                return _fail(f"{args.out} exists; --force to overwrite it")
            size = backup(require_database(args.data), args.out)
            print(f"backed up {size} bytes to {args.out}")
            return 0
        if args.command == "restore":
            with DataDirLock(args.data):
                size = restore(args.file, db_path(args.data))
            print(f"restored {size} bytes into {db_path(args.data)}")
            return 0
    except DataDirBusy as exc:
        return _fail(f"{exc}; stop the server first")
    except (NoDatabase, DataDirUnusable, NotABackup) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    except SettingsError as exc:
        return _fail(f"settings: {exc}", USAGE_ERROR)
    except sqlite3.Error as exc:
        return _fail(f"database: {exc}")
    except Exception as exc:
        if not is_storage_failure(exc):  # PostgreSQL unreachable, refusing, failing
            raise
        return _fail(f"database: {exc}")
    return _fail(f"unknown command {args.command}", USAGE_ERROR)


if __name__ == "__main__":
    sys.exit(main())
