"""The operator's commands that act on a running gateway through its HTTP API (the
actors are the only writers): cancel, pause, resume, retry, reclaim (one stale task, or
every one a filter matches) and redrive jobs; list, pause, resume and throttle sites.
Human tables by default, ``--json`` for the reply as is.

    leasegate tasks retry t-1 --reason "site fixed"
    leasegate tasks redrive --status failed --site shop --reason "outage over" --dry-run
    leasegate sites throttle shop --rate 2 --json

Every command takes ``--url`` (default ``$LEASEGATE_URL`` or http://127.0.0.1:8470)
and ``--key`` (default ``$LEASEGATE_ADMIN_KEY``): an admin key. Exit status: 0 done;
1 the gateway refused or could not be reached (one line on stderr, with its code);
2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, TypeAlias

from leasegate.actors.payloads import compact_json, exact_loads
from leasegate.cli.table import gateway_options, path_id, print_json, table, when

SITE_COLUMNS = (("site", "SITE"), ("paused", "PAUSED"), ("rate", "RATE"),
                ("queued_tasks", "TASKS"), ("queued_queries", "QUERIES"), ("reason", "REASON"))
USAGE_ERROR = 2
FAILED = 1
# A group's commands (argparse's class is generic to type checkers only: a string here).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Groups = Callable[[str, str], Subcommands]


class Refused(Exception):
    """The gateway answered with an error, or could not be reached."""

    status = FAILED


class BadArguments(Refused):
    """Arguments that would be refused, refused before asking (exit status 2)."""

    status = USAGE_ERROR


def _command(group: Subcommands, name: str, doc: str) -> argparse.ArgumentParser:
    """A command on a running gateway, its ``--help`` opening with ``doc``."""
    return gateway_options(group.add_parser(name, help=doc,
                                            description=doc[0].upper() + doc[1:] + "."))


def add_reason(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--reason", required=required,
                        help="why (1-500 characters; recorded with who did it)")


def register(group: Groups) -> None:
    """Add the commands to the ``tasks``, ``queries`` and ``sites`` groups."""
    tasks, queries = group("tasks", "tasks"), group("queries", "queries")
    _task_commands(tasks)
    for name, noun, parser_group in (("tasks", "task", tasks), ("queries", "query", queries)):
        _retry_commands(parser_group, name, noun)
    _site_commands(group("sites", "sites' dispatch controls"))


def _task_commands(tasks: Subcommands) -> None:
    """What only tasks have: cancel, resume, and the reclaim of a stale one."""
    for action, doc in (("cancel", "cancel a task"),
                        ("pause", "pause a batch task (queued: now; running: at its "
                                  "next checkpoint)"),
                        ("resume", "resume a paused task (back to the queue)")):
        control = _command(tasks, action, doc)
        control.add_argument("task_id")
        add_reason(control, required=False)
        control.set_defaults(handler=lambda a, action=action: post_and_show(
            a, f"/v1/tasks/{path_id(a.task_id)}/{action}", reason_body(a), _job))
    reclaim = _command(tasks, "reclaim", "resolve a stale task: requeue it, or record how it "
                                         "ended (succeeded or failed) as you found out")
    reclaim.add_argument("task_id")
    reclaim.add_argument("--action", required=True, choices=("requeue", "succeeded", "failed"))
    add_reason(reclaim)
    reclaim.add_argument("--result", default=None, help="the result, as JSON")
    reclaim.add_argument("--cost", type=int, default=None, help="what was delivered")
    reclaim.set_defaults(handler=lambda a: post_and_show(
        a, f"/v1/tasks/{path_id(a.task_id)}/reclaim", _reclaim_body(a), _job))
    bulk = _command(tasks, "reclaim-stale", "resolve every stale task the filters match "
                                            "with one outcome (try --dry-run first: it "
                                            "counts them)")
    bulk.add_argument("--action", required=True, choices=("requeue", "succeeded", "failed"))
    add_reason(bulk)
    for option in ("site", "account"):
        bulk.add_argument(f"--{option}", default=None, help=f"only this {option}")
    _bulk_options(bulk, "went stale", "the first this many to go stale", "reclaimed")
    bulk.set_defaults(handler=lambda a: post_and_show(a, "/v1/tasks/reclaim", _bulk_reclaim_body(a),
                                                      _reclaimed))


def _bulk_options(parser: argparse.ArgumentParser, when: str, first: str, done: str) -> None:
    """A bulk action's time window (``when`` a job ...), bound and dry run."""
    parser.add_argument("--since", default=None, help=f"{when} at or after (RFC 3339)")
    parser.add_argument("--until", default=None, help=f"{when} before (RFC 3339)")
    parser.add_argument("--limit", type=int, default=1000,
                        help=f"{first} (1-10000, default %(default)s)")
    parser.add_argument("--dry-run", action="store_true",
                        help=f"count what would be {done}, change nothing")


def _retry_commands(parser_group: Subcommands, name: str, noun: str) -> None:
    """A channel's retry of one job, and its redrive of many."""
    retry = _command(parser_group, "retry",
                     f"retry a failed or expired {noun} as a new attempt (its history and "
                     "errors are kept)")
    retry.add_argument("job_id", metavar=f"{noun}_id")
    add_reason(retry)
    retry.set_defaults(handler=lambda a: post_and_show(
        a, f"/v1/{name}/{path_id(a.job_id)}/retry", {"reason": a.reason}, _job))
    redrive = _command(parser_group, "redrive",
                       f"retry every {noun} of a status that the filters match (try "
                       "--dry-run first: it counts them)")
    redrive.add_argument("--status", required=True,
                         choices=("failed", "expired", "canceled") if noun == "task"
                         else ("failed", "expired"))
    add_reason(redrive)
    for option in ("site", "kind", "tenant"):
        redrive.add_argument(f"--{option}", default=None, help=f"only this {option}")
    _bulk_options(redrive, "ended", "the oldest this many", "retried")
    redrive.set_defaults(handler=lambda a: post_and_show(
        a, f"/v1/{name}/redrive", _redrive_body(a), _redriven))


def _site_commands(sites: Subcommands) -> None:
    listing = _command(sites, "list", "paused, throttled and busy sites")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int, default=0)
    listing.set_defaults(handler=_list_sites)
    for action, doc in (("pause", "lease nothing of a site (its work still queues)"),
                        ("resume", "lease a paused site's work again")):
        parser = _command(sites, action, doc)
        parser.add_argument("site")
        add_reason(parser)
        parser.set_defaults(handler=lambda a, action=action: post_and_show(
            a, f"/v1/sites/{path_id(a.site)}/{action}", {"reason": a.reason}, _site))
    throttle = _command(sites, "throttle", "at most N leases a second of a site's jobs, "
                                           "across every worker (--off lifts it)")
    throttle.add_argument("site")
    rate = throttle.add_mutually_exclusive_group(required=True)
    rate.add_argument("--rate", type=float, help="leases a second (> 0)")
    rate.add_argument("--off", action="store_true", help="lift the throttle")
    throttle.set_defaults(handler=lambda a: send_and_show(
        a, "PUT", f"/v1/sites/{path_id(a.site)}/throttle", _throttle_body(a), _site))


def run(args: argparse.Namespace) -> int:
    """Run the command ``args`` names (its ``handler``)."""
    if not (args.key or os.environ.get("LEASEGATE_ADMIN_KEY")):
        print("leasegate: an admin key is needed: --key or LEASEGATE_ADMIN_KEY",
              file=sys.stderr)
        return USAGE_ERROR
    try:
        code: int = args.handler(args)
    except Refused as exc:
        print(f"leasegate: {exc}", file=sys.stderr)
        return exc.status
    return code


# ---- requests -------------------------------------------------------------------------

def api_request(args: argparse.Namespace, method: str, path: str,
                body: dict[str, Any] | None = None,
                params: dict[str, Any] | None = None) -> Any:
    import httpx  # here: `leasegate serve` starts without it

    key = args.key or os.environ.get("LEASEGATE_ADMIN_KEY", "")
    try:
        headers = {"Authorization": f"Bearer {key}"}
        if body is not None:  # compact_json: a --result's numbers as written (1e2 stays)
            headers["Content-Type"] = "application/json"
        response = httpx.request(method, args.url.rstrip("/") + path, params=params,
                                 content=None if body is None else compact_json(body),
                                 timeout=30, headers=headers)
    except httpx.HTTPError as exc:
        raise Refused(f"cannot reach {args.url}: {exc}") from None
    try:
        reply = response.json()
    except ValueError:
        reply = None
    if response.status_code >= 400:
        error = reply.get("error", {}) if isinstance(reply, dict) else {}
        raise Refused(f"{response.status_code} {error.get('type', 'error')} "
                      f"({error.get('code', '-')}): {error.get('message', response.text)}")
    return reply


def send_and_show(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None,
                  show: Callable[[Any], None]) -> int:
    reply = api_request(args, method, path, body)
    if args.json:
        print_json(reply)
    else:
        show(reply)
    return 0


def post_and_show(args: argparse.Namespace, path: str, body: dict[str, Any] | None,
                  show: Callable[[Any], None]) -> int:
    return send_and_show(args, "POST", path, body, show)


def reason_body(args: argparse.Namespace) -> dict[str, Any] | None:
    return None if args.reason is None else {"reason": args.reason}


def _redrive_body(args: argparse.Namespace) -> dict[str, Any]:
    body = {"reason": args.reason, "status": args.status, "limit": args.limit,
            "dry_run": args.dry_run}
    for name in ("site", "kind", "tenant", "since", "until"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    return body


def _bulk_reclaim_body(args: argparse.Namespace) -> dict[str, Any]:
    body = {"reason": args.reason, "action": args.action, "limit": args.limit,
            "dry_run": args.dry_run}
    for name in ("site", "account", "since", "until"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    return body


def _reclaim_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"action": args.action, "reason": args.reason}
    if args.result is not None:
        try:
            body["result"] = exact_loads(args.result)
        except ValueError as exc:
            raise Refused(f"--result is not JSON: {exc}") from None
    if args.cost is not None:
        body["cost"] = args.cost
    return body


def _throttle_body(args: argparse.Namespace) -> dict[str, Any]:
    """The throttle's body, or raise: a bad --rate named as the flag, not the API's field."""
    if args.rate is not None and not args.rate > 0:  # also NaN
        raise BadArguments(f"--rate must be more than 0 leases a second (got {args.rate:g}); "
                           "--off lifts the throttle")
    return {"leases_per_second": None if args.off else args.rate}


def list_page(args: argparse.Namespace, path: str, params: dict[str, Any],
              row: Callable[[dict[str, Any]], dict[str, Any]],
              columns: tuple[tuple[str, str], ...], noun: str) -> int:
    """One page of a list route: a table of its items and how many of how many (or the
    reply as JSON)."""
    reply = api_request(args, "GET", path, params={"limit": args.limit, "offset": args.offset,
                                                   **params})
    if args.json:
        print_json(reply)
        return 0
    table([row(item) for item in reply["items"]], columns)
    print(f"{len(reply['items'])} of {reply['total']} {noun}")
    return 0


def _list_sites(args: argparse.Namespace) -> int:
    return list_page(args, "/v1/sites", {}, _site_row, SITE_COLUMNS, "sites")


# ---- human output (``cli.table``'s tables, as the inspecting commands print them) ---------

def _job(job: dict[str, Any]) -> None:
    job_id = job.get("task_id") or job.get("query_id")
    error = job.get("error") or {}
    rows = [("status", job["status"]), ("site", job["site"]), ("kind", job["kind"]),
            ("attempts", job["attempts"]), ("updated", when(job["updated_at"]))]
    if error:
        rows.append(("error", error.get("message")))
    print(f"{'task' if 'task_id' in job else 'query'} {job_id}")
    table([{"field": field, "value": value} for field, value in rows],
          (("field", "FIELD"), ("value", "VALUE")))


def _redriven(reply: dict[str, Any]) -> None:
    if reply["requeued"] == 0 and reply["matched"]:
        print(f"matched {reply['matched']}, requeued 0 (a dry run changes nothing)")
    else:
        print(f"matched {reply['matched']}, requeued {reply['requeued']}")


def _reclaimed(reply: dict[str, Any]) -> None:
    if reply["reclaimed"] == 0 and reply["matched"]:
        print(f"matched {reply['matched']} stale, reclaimed 0 (a dry run changes nothing)")
    else:
        print(f"matched {reply['matched']} stale, reclaimed {reply['reclaimed']}")


def _site_row(site: dict[str, Any]) -> dict[str, Any]:
    rate = site["leases_per_second"]
    return {**site, "paused": "paused" if site["paused"] else "-",
            "rate": "-" if rate is None else f"{rate:g}/s"}


def _site(site: dict[str, Any]) -> None:
    table([_site_row(site)], SITE_COLUMNS)
