"""The console, installed on the app: its blueprint with every page and form."""

from __future__ import annotations

from quart import Quart
from quart_schema import hide

from leasegate.http.console import actions, operator, pages, schedules, webhooks
from leasegate.http.console.blueprint import bp
from leasegate.system import System

__all__ = ["bp", "install"]
# Imported for their routes on ``bp``.
ROUTE_MODULES = (pages, actions, operator, schedules, webhooks)


def install(app: Quart, system: System) -> None:
    app.register_blueprint(bp)
    for endpoint, view in app.view_functions.items():
        if endpoint.startswith(f"{bp.name}."):
            hide(view)  # pages, not API: kept out of the OpenAPI document
