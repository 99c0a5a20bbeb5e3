"""``leasegate webhooks``: a tenant's webhook endpoints and their deliveries, on a
running gateway (its HTTP API), as ``cli.actions``' commands are::

    leasegate webhooks create https://hooks.example.com/lg --events task.succeeded --tenant acme
    leasegate webhooks list
    leasegate webhooks deliveries ep_...
    leasegate webhooks retry ep_... msg_...
    leasegate webhooks delete ep_...

``--key`` (default ``$LEASEGATE_ADMIN_KEY``) may also be a client key: then its own
tenant's endpoints, and ``--tenant`` is not needed.
"""

from __future__ import annotations

import argparse
from typing import Any

from leasegate.cli.actions import Groups, Subcommands, api_request, send_and_show
from leasegate.cli.table import gateway_options, path_id, print_json, table

ENDPOINT_COLUMNS = (("endpoint_id", "ENDPOINT"), ("tenant", "TENANT"), ("url", "URL"),
                    ("events", "EVENTS"), ("state", "STATE"))
DELIVERY_COLUMNS = (("delivery_id", "DELIVERY"), ("event_type", "EVENT"), ("job_id", "JOB"),
                    ("status", "STATUS"), ("attempts", "ATTEMPTS"),
                    ("last_status_code", "CODE"), ("next_attempt_at", "NEXT"),
                    ("last_error", "LAST ERROR"))


def register(group: Groups) -> None:
    commands = group("webhooks", "webhook endpoints and their deliveries")
    _endpoint_commands(commands)
    _delivery_commands(commands)


def _endpoint_commands(commands: Subcommands) -> None:
    listing = gateway_options(commands.add_parser("list", help="webhook endpoints"))
    listing.add_argument("--tenant", default=None, help="only this tenant's (admin)")
    listing.set_defaults(handler=_list)
    create = gateway_options(commands.add_parser(
        "create", help="a new endpoint; prints its signing secret, this once"))
    create.add_argument("webhook_url", metavar="URL")
    create.add_argument("--events", required=True,
                        help="comma-separated: task.succeeded, task.failed, task.canceled, "
                             "task.stale, task.expired, query.succeeded, query.failed, "
                             "query.expired")
    create.add_argument("--tenant", default=None, help="whose jobs (an admin key's must say)")
    create.add_argument("--description", default=None)
    create.set_defaults(handler=lambda a: send_and_show(a, "POST", "/v1/webhooks", _create_body(a),
                                                        _created))
    delete = gateway_options(commands.add_parser(
        "delete", help="delete an endpoint and its deliveries"))
    delete.add_argument("endpoint_id")
    delete.set_defaults(handler=_delete)


def _delivery_commands(commands: Subcommands) -> None:
    listing = gateway_options(commands.add_parser(
        "deliveries", help="an endpoint's last 100 deliveries"))
    listing.add_argument("endpoint_id")
    listing.set_defaults(handler=lambda a: send_and_show(
        a, "GET", f"/v1/webhooks/{path_id(a.endpoint_id)}/deliveries", None,
        lambda reply: table(reply["items"], DELIVERY_COLUMNS)))
    retry = gateway_options(commands.add_parser("retry", help="send a delivery again now"))
    retry.add_argument("endpoint_id")
    retry.add_argument("delivery_id")
    retry.set_defaults(handler=lambda a: send_and_show(
        a, "POST", f"/v1/webhooks/{path_id(a.endpoint_id)}/deliveries/"
                   f"{path_id(a.delivery_id)}/retry", None,
        lambda delivery: table([delivery], DELIVERY_COLUMNS)))


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"url": args.webhook_url,
                            "events": [e.strip() for e in args.events.split(",") if e.strip()]}
    for name in ("tenant", "description"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    return body


def _endpoint_row(endpoint: dict[str, Any]) -> dict[str, Any]:
    state = "disabled" if endpoint["disabled"] else "enabled"
    return {**endpoint, "events": ",".join(endpoint["events"]), "state": state}


def _created(endpoint: dict[str, Any]) -> None:
    table([_endpoint_row(endpoint)], ENDPOINT_COLUMNS)
    print(f"secret (shown once): {endpoint['secret']}")


def _list(args: argparse.Namespace) -> int:
    params = {"limit": 500} | ({"tenant": args.tenant} if args.tenant else {})
    reply = api_request(args, "GET", "/v1/webhooks", params=params)
    if args.json:
        print_json(reply)
        return 0
    table([_endpoint_row(e) for e in reply["items"]], ENDPOINT_COLUMNS)
    for endpoint in reply["items"]:
        if endpoint["disabled_reason"]:
            print(f"{endpoint['endpoint_id']}: {endpoint['disabled_reason']}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    api_request(args, "DELETE", f"/v1/webhooks/{path_id(args.endpoint_id)}")
    if not args.json:
        print(f"deleted {args.endpoint_id}")
    return 0
