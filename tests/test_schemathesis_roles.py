"""The served gateway keeps its OpenAPI contract (schemathesis; see
tests/schemathesis_contract.py): the worker's key and the client's (the admin's and no
key are in test_schemathesis.py, so that another test process runs them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import served
from tests.schemathesis_contract import gateway, keeps_its_contract

__all__ = ["gateway"]  # the module's own served gateway (a module-scoped fixture)

ROLES = ("worker", "client")


@pytest.mark.parametrize("role", ROLES)
def test_the_served_gateway_keeps_its_contract(gateway: served.Served, role: str,
                                               tmp_path: Path) -> None:
    keeps_its_contract(gateway, role, tmp_path)
