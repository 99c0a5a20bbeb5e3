"""``leasegate tasks list|show``, ``queries list|show``, ``keys list|revoke``: looking at
jobs and keys from the shell, in the style of ``rq info`` and ``temporal workflow list``
(a table for people by default, ``--json`` for scripts).

Jobs are read through a running gateway's HTTP API (``--url``, ``--key`` or
``LEASEGATE_ADMIN_KEY``): the gateway owns them. Keys are read and revoked in the
database directly, as ``keys create`` makes them, with the server running or not; a
running gateway refuses a revoked key within a second, and ends its long-polls, event
streams and console sessions (told by PostgreSQL at once; on SQLite it looks every
``key_revocation_poll_interval``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leasegate.cli.table import (
    CommandFailed,
    UsageError,
    gateway_options,
    path_id,
    print_json,
    table,
    when,
)

KEY_VARIABLE = "LEASEGATE_ADMIN_KEY"
TASK_COLUMNS = (("task_id", "TASK"), ("status", "STATUS"), ("kind", "KIND"), ("site", "SITE"),
                ("account", "ACCOUNT"), ("tenant", "TENANT"), ("lease_owner", "WORKER"),
                ("created_at", "CREATED"))
QUERY_COLUMNS = (("query_id", "QUERY"), ("status", "STATUS"), ("kind", "KIND"),
                 ("site", "SITE"), ("tenant", "TENANT"), ("lease_owner", "WORKER"),
                 ("attempts", "ATTEMPTS"), ("created_at", "CREATED"))
WORKER_COLUMNS = (("worker_id", "WORKER"), ("state", "STATE"), ("last_seen_at", "LAST SEEN"),
                  ("channels", "CHANNELS"), ("sites", "SITES"), ("tasks", "TASKS"))
KEY_COLUMNS = (("key_id", "KEY"), ("role", "ROLE"), ("name", "NAME"), ("tenant", "TENANT"),
               ("sites", "SITES"), ("created_at", "CREATED"), ("revoked_at", "REVOKED"))


def subcommands(commands: Any, name: str, help: str) -> Any:
    """The sub-commands of group ``name`` (made if no module made it yet), so that
    several modules can each add theirs to one group."""
    parser = commands.choices.get(name) or commands.add_parser(name, help=help)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")


def _search_options(parser: argparse.ArgumentParser, *, accounts: bool) -> None:
    parser.add_argument("--status", help="only this status")
    parser.add_argument("--kind", help="only this kind")
    parser.add_argument("--site", help="only this site")
    if accounts:
        parser.add_argument("--account", help="only this account")
    parser.add_argument("--tenant", help="only this tenant's")
    parser.add_argument("--worker", help="only those the worker WORKER leased last")
    parser.add_argument("--id", dest="id_prefix", metavar="PREFIX",
                        help="only ids that start with PREFIX")
    parser.add_argument("--since", help="created at or after (RFC 3339: 2026-11-30T08:00:00Z)")
    parser.add_argument("--until", help="created before (RFC 3339)")
    parser.add_argument("--text", help="text inside the params or the error (ASCII letters "
                                       "in either case; reads the newest 10,000 matches of "
                                       "the other filters)")
    parser.add_argument("--limit", type=int, default=50, help="at most (1-500, default 50)")
    parser.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")


def add_commands(commands: Any, data_options: Callable[[argparse.ArgumentParser], None]
                 ) -> None:
    """Register the commands on the ``tasks``, ``queries`` and ``keys`` groups;
    ``data_options`` adds ``--data`` (and the like) to a command that opens the database."""
    for channel, noun, columns in (("tasks", "task", TASK_COLUMNS),
                                   ("queries", "query", QUERY_COLUMNS)):
        group = subcommands(commands, channel, f"look at and act on {channel}")
        listing = group.add_parser(
            "list", help=f"{channel}, newest first, that match every filter given",
            description=f"List {channel} through the gateway's GET /v1/{channel}.")
        _search_options(listing, accounts=channel == "tasks")
        gateway_options(listing)
        listing.set_defaults(run=_lister(channel, columns))
        show = group.add_parser("show", help=f"one {noun}, all of it",
                                description=f"Show one {noun} (GET /v1/{channel}/ID).")
        show.add_argument("job_id", metavar="ID", help=f"the {noun}'s id")
        gateway_options(show)
        show.set_defaults(run=_shower(channel))
    workers = commands.add_parser(
        "workers", help="the workers seen, what they serve and the tasks they hold",
        description="List the workers the gateway has seen (GET /v1/workers): online or "
                    "offline, when last seen, the sites they serve (every site: all) and "
                    "the tasks they hold.")
    workers.add_argument("--limit", type=int, default=50, help="at most (1-500, default 50)")
    workers.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")
    gateway_options(workers)
    workers.set_defaults(run=_list_workers)
    keys = subcommands(commands, "keys", "manage API keys")
    listing = keys.add_parser("list", help="every key, newest first (no secrets)",
                              description="List the keys in the database (server running "
                                          "or not).")
    listing.add_argument("--json", action="store_true", help="print JSON")
    data_options(listing)
    listing.set_defaults(run=_list_keys)
    revoke = keys.add_parser(
        "revoke", help="revoke a key",
        description="Revoke a key in the database (server running or not). Every running "
                    "gateway refuses it within a second, and ends its long-polls, event "
                    "streams and console sessions; DELETE /v1/admin/keys/ID does so at "
                    "once.")
    revoke.add_argument("key_id", metavar="KEY_ID", help="the key's id (lg_<KEY_ID>_...)")
    revoke.add_argument("--json", action="store_true", help="print JSON")
    data_options(revoke)
    revoke.set_defaults(run=_revoke_key)


# ---- jobs, through the gateway ----------------------------------------------------------

def _get(args: argparse.Namespace, path: str, params: dict[str, Any] | None = None) -> Any:
    key = args.key or os.environ.get(KEY_VARIABLE, "")
    if not key:
        raise UsageError(f"an admin key is needed: --key or {KEY_VARIABLE}")
    import httpx  # here, as in cli.actions: `leasegate serve` starts without it

    try:
        response = httpx.get(args.url.rstrip("/") + path, params=params, timeout=30,
                             headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as exc:
        raise CommandFailed(f"cannot reach the gateway at {args.url}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        raise CommandFailed(f"{args.url} answered {response.status_code}, not JSON: is it "
                            "a leasegate gateway?") from None
    if response.status_code >= 400:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        message = f"{response.status_code} {error.get('type', '')}: {error.get('message', '')}"
        raise UsageError(message) if response.status_code == 400 else CommandFailed(message)
    return body


def _lister(channel: str, columns: Sequence[tuple[str, str]]
            ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        names = ("status", "kind", "site", "account", "tenant", "worker", "id_prefix",
                 "since", "until", "text", "limit", "offset")
        params = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
        page = _get(args, f"/v1/{channel}", params)
        if args.json:
            print_json(page)
            return 0
        if channel == "tasks" and args.status is None:
            _stale_first(args, params, columns)
        table(page["items"], columns)
        shown = len(page["items"])
        first = page["offset"] + 1 if shown else page["offset"]
        print(f"{first}-{page['offset'] + shown} of {page['total']} {channel}, newest first")
        searched = page.get("searched")
        if searched and not searched["complete"]:
            print(f"the text was looked for in the newest {searched['rows']} only: narrow "
                  "the search (--until, --site, --status) to reach older ones")
        return 0

    return run


def _stale_first(args: argparse.Namespace, params: dict[str, Any],
                 columns: Sequence[tuple[str, str]]) -> None:
    """Above a list of every status, the stale tasks the other filters match: each waits
    for an operator (``leasegate tasks reclaim``), whatever page the list is at."""
    stale = _get(args, "/v1/tasks", {**params, "status": "stale", "offset": 0})
    if stale["total"]:
        print(f"{stale['total']} stale, waiting for an operator (leasegate tasks reclaim "
              "ID --action ...):")
        table(stale["items"], columns)
        print()


def _list_workers(args: argparse.Namespace) -> int:
    page = _get(args, "/v1/workers", {"limit": args.limit, "offset": args.offset})
    if args.json:
        print_json(page)
        return 0
    table([{**w, "sites": ",".join(w["sites"]) if w.get("sites") else "(all)",
            "channels": ",".join(w.get("channels", ())),
            "tasks": " ".join(w["task_ids"]) or "-"} for w in page["items"]], WORKER_COLUMNS)
    online = sum(1 for w in page["items"] if w["state"] == "online")
    print(f"{len(page['items'])} of {page['total']} workers, {online} online")
    return 0


def _shower(channel: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        job = _get(args, f"/v1/{channel}/{path_id(args.job_id)}")
        if args.json:
            print_json(job)
            return 0
        _print_job(job)
        history = _get(args, f"/v1/{channel}/{path_id(args.job_id)}/events")
        _print_history(history["items"])
        return 0

    return run


def _print_history(events: Sequence[dict[str, Any]]) -> None:
    """The job's history, oldest first: when, what happened, the status it left, and
    who and why for an operator's action."""
    print("history:")
    for event in events:
        detail = event.get("detail") or {}
        said = ", ".join(f"{name}={detail[name]}" for name in ("by", "reason", "worker_id",
                                                                "attempt")
                         if detail.get(name) is not None)
        print(f"  {when(event['at'])}  {event['kind']:<10} {event['status']:<10} {said}"
              .rstrip())


def _print_job(job: dict[str, Any]) -> None:
    skip = {"params", "result", "progress", "error", "errors", "billing", "reclaim"}
    width = max(len(k) for k in job)
    for name, value in job.items():
        if name not in skip and value is not None:
            print(f"{name:<{width}}  {when(value) if name.endswith('_at') else value}")
    for name in ("reclaim", "billing"):
        if job.get(name):
            print(f"{name:<{width}}  " + ", ".join(f"{k}={v}" for k, v in job[name].items()))
    for name in ("params", "progress", "result"):
        if job.get(name) is not None:
            print(f"{name}:")
            print("  " + json.dumps(job[name], indent=2, ensure_ascii=False).replace("\n", "\n  "))
    error = job.get("error")
    if error:
        code = f" (code {error['code']})" if error.get("code") is not None else ""
        print(f"error: {error.get('type') or 'Error'}{code}: {error['message']}")
        if error.get("traceback"):
            sys.stdout.write("  " + error["traceback"].rstrip("\n").replace("\n", "\n  ") + "\n")
    if job.get("errors"):
        print("attempts' errors (oldest first):")
        for e in job["errors"]:
            code = f" (code {e['code']})" if e.get("code") is not None else ""
            print(f"  #{e['attempt']}  {when(e['at'])}  {e.get('worker_id') or '-'}  "
                  f"{e.get('type') or 'Error'}{code}: {e['message']}")


# ---- keys, in the database ----------------------------------------------------------------

def _open(args: argparse.Namespace) -> Any:
    from leasegate.settings import check_database_url
    from leasegate.storage.database import open_database
    from leasegate.storage.datadir import require_database

    url = (getattr(args, "database", None) or os.environ.get("LEASEGATE_DATABASE_URL", "")
           ).strip() or None
    check_database_url(url)  # SettingsError: a usage error
    if url is None:
        require_database(Path(args.data))  # never a new empty database from the wrong folder
    # Always FULL, whatever the server's sqlite_synchronous: what is printed is on disk.
    return open_database(url, Path(args.data), synchronous="FULL", inline=True,
                         name="leasegate keys")


def with_keys(args: argparse.Namespace, work: Callable[[Any], Any]) -> Any:
    """``work(conn)`` in one transaction on the database of ``--data``/``--database``,
    with the server running or not (WAL lets this write beside it, and PostgreSQL
    beside every gateway): ``keys create``, ``list`` and ``revoke``."""
    from leasegate.storage.connection import transaction
    from leasegate.storage.database import migrate

    db = _open(args)
    try:
        def run(conn: Any) -> Any:
            migrate(conn)
            with transaction(conn):
                return work(conn)

        return db.run_sync(run)
    finally:
        db.close()


def _key_json(row: Any) -> dict[str, Any]:
    from leasegate.actors.keys.views import key_view
    from leasegate.http.server.render import to_json

    rendered: dict[str, Any] = to_json(key_view(row))
    return rendered


def _list_keys(args: argparse.Namespace) -> int:
    from leasegate.storage import keys_sql

    def every_key(conn: Any) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while True:  # a page at a time
            total, rows = keys_sql.page(conn, 500, len(found))
            found += [_key_json(row) for row in rows]
            if not rows or len(found) >= total:
                return found

    keys: list[dict[str, Any]] = with_keys(args, every_key)
    if args.json:
        print_json({"items": keys, "total": len(keys)})
        return 0
    table([{**k, "sites": ",".join(k["sites"]) if k["sites"] else None} for k in keys],
          KEY_COLUMNS)
    print(f"{len(keys)} key{'' if len(keys) == 1 else 's'}, "
          f"{sum(1 for k in keys if k['revoked_at'] is None)} live")
    return 0


def _revoke_key(args: argparse.Namespace) -> int:
    from leasegate.storage import keys_sql

    def revoke(conn: Any) -> tuple[Any, bool]:
        done = keys_sql.revoke(conn, args.key_id, time.time())
        return keys_sql.get(conn, args.key_id), done

    row, done = with_keys(args, revoke)
    if row is None:
        raise CommandFailed(f"no key {args.key_id}")
    key = _key_json(row)
    if args.json:
        print_json(key)
    elif done:
        print(f"revoked {key['role']} key {key['key_id']} ({key['name']}); a running gateway "
              "refuses it within a second")
    else:
        print(f"{key['role']} key {key['key_id']} ({key['name']}) was revoked already, at "
              f"{when(key['revoked_at'])}")
    return 0
