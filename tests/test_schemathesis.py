"""The served gateway keeps its OpenAPI contract (schemathesis; see
tests/schemathesis_contract.py): the admin's key, and no key at all. The worker's and the
client's are in test_schemathesis_roles.py, so that another test process runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import served
from tests.schemathesis_contract import gateway, keeps_its_contract

__all__ = ["gateway"]  # the module's own served gateway (a module-scoped fixture)

ROLES = ("admin", None)  # None: no key


@pytest.mark.parametrize("role", ROLES, ids=[role or "no-key" for role in ROLES])
def test_the_served_gateway_keeps_its_contract(gateway: served.Served, role: str | None,
                                               tmp_path: Path) -> None:
    keeps_its_contract(gateway, role, tmp_path)
