"""The ``leasegate`` command (``main``): serve, inspect and act on a gateway."""

from leasegate.cli.commands import main

__all__ = ["main"]
