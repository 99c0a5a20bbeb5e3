"""What a route reaches beyond its request: the running system, the caller's id."""

from __future__ import annotations

from quart import current_app

from leasegate.actors.system import System


def system() -> System:
    found: System = current_app.extensions["leasegate"]
    return found
