"""``leasegate schedules``: recurring schedules on a running gateway, through its HTTP
API (as ``cli.actions``' commands: ``--url``, ``--key``, ``--json``)::

    leasegate schedules put nightly --tenant acme --cron "0 2 * * *" \\
        --timezone Europe/Berlin --channel task \\
        --template '{"site": "shop", "kind": "export", "params": {}}'
    leasegate schedules put nightly --file nightly.json   # the PUT body as JSON
    leasegate schedules list
    leasegate schedules show nightly
    leasegate schedules pause nightly --reason "shop closed"
    leasegate schedules resume nightly
    leasegate schedules trigger nightly
    leasegate schedules delete nightly
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from leasegate.cli.actions import (
    Groups,
    Refused,
    add_reason,
    api_request,
    list_page,
    post_and_show,
    reason_body,
    send_and_show,
)
from leasegate.cli.table import gateway_options, path_id, print_json, table

COLUMNS = (("schedule_id", "SCHEDULE"), ("tenant", "TENANT"), ("cron", "CRON"),
           ("timezone", "TIMEZONE"), ("channel", "CHANNEL"), ("state", "STATE"),
           ("next_fire_at", "NEXT FIRE"))
FIRE_COLUMNS = (("fire_at", "FIRE"), ("job_id", "JOB"), ("status", "STATUS"),
                ("error", "ERROR"))
FLAGS = ("cron", "timezone", "channel", "overlap", "catch_up", "tenant")


def register(group: Groups) -> None:
    schedules = group("schedules", "recurring schedules")
    listing = gateway_options(schedules.add_parser("list", help="every schedule"))
    listing.add_argument("--tenant", default=None, help="only this tenant's")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int, default=0)
    listing.set_defaults(handler=_list)
    show = gateway_options(schedules.add_parser(
        "show", help="a schedule, its next fire and its last fires"))
    show.add_argument("schedule_id")
    show.set_defaults(handler=lambda a: send_and_show(
        a, "GET", f"/v1/schedules/{path_id(a.schedule_id)}", None, _schedule))
    put = gateway_options(schedules.add_parser(
        "put", help="create or replace a schedule (from flags, a JSON file, or both: "
                    "flags win)"))
    put.add_argument("schedule_id")
    put.add_argument("--file", type=Path, default=None, help="the PUT body, as JSON")
    put.add_argument("--cron", help='five cron fields, e.g. "0 2 * * *"')
    put.add_argument("--timezone", help="IANA time zone (default UTC)")
    put.add_argument("--channel", choices=("task", "query"))
    put.add_argument("--template", help="the submit body without its id, as JSON")
    put.add_argument("--overlap", choices=("skip", "allow"))
    put.add_argument("--catch-up", dest="catch_up", choices=("latest", "none", "all"))
    put.add_argument("--paused", action="store_true", default=None, help="create it paused")
    put.add_argument("--tenant", help="whose (required with an admin key)")
    put.set_defaults(handler=lambda a: send_and_show(
        a, "PUT", f"/v1/schedules/{path_id(a.schedule_id)}", _body(a), _schedule))
    for action, doc in (("pause", "no fires until resumed"),
                        ("resume", "fire again, from the next cron time"),
                        ("trigger", "fire now")):
        parser = gateway_options(schedules.add_parser(action, help=doc))
        parser.add_argument("schedule_id")
        add_reason(parser, required=False)
        parser.set_defaults(handler=lambda a, action=action: post_and_show(
            a, f"/v1/schedules/{path_id(a.schedule_id)}/{action}", reason_body(a),
            _schedule))
    delete = gateway_options(schedules.add_parser("delete", help="delete a schedule"))
    delete.add_argument("schedule_id")
    delete.set_defaults(handler=_delete)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Refused(f"{what} is not JSON: {exc}") from None


def _body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.file is not None:
        try:
            text = args.file.read_text(encoding="utf-8")
        except OSError as exc:
            raise Refused(f"cannot read {args.file}: {exc}") from None
        body = _json(text, str(args.file))
        if not isinstance(body, dict):
            raise Refused(f"{args.file} must hold a JSON object")
    body.update({name: getattr(args, name) for name in FLAGS
                 if getattr(args, name) is not None})
    if args.template is not None:
        body["template"] = _json(args.template, "--template")
    if args.paused is not None:
        body["paused"] = True
    return body


def _list(args: argparse.Namespace) -> int:
    tenant = {} if args.tenant is None else {"tenant": args.tenant}
    return list_page(args, "/v1/schedules", tenant, _row, COLUMNS, "schedules")


def _delete(args: argparse.Namespace) -> int:
    api_request(args, "DELETE", f"/v1/schedules/{path_id(args.schedule_id)}")
    if args.json:
        print_json({"deleted": args.schedule_id})
    else:
        print(f"schedule {args.schedule_id} deleted")
    return 0


def _row(schedule: dict[str, Any]) -> dict[str, Any]:
    return {**schedule, "state": "paused" if schedule["paused"] else "active"}


def _schedule(schedule: dict[str, Any]) -> None:
    table([_row(schedule)], COLUMNS)
    fires = [{**f, "error": (f["error"] or {}).get("message", "")} for f in schedule["fires"]]
    if fires:
        print()
        table(fires, FIRE_COLUMNS)
