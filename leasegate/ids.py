"""The id alphabet of the API, one definition for bodies, paths, headers and actors.

Ids supplied by callers (task, query, worker, device, request ids, refs, sites,
accounts, kinds) are 1-64 characters of ``[A-Za-z0-9._:@-]``; artifact names
are 1-128 of ``[A-Za-z0-9._-]``, not starting with a dot. Anything else is
refused, never truncated. Matching is always whole-string (``fullmatch``):
``$`` would accept a trailing newline::

    is_id("order-1")     # True
    is_id("order-1\\n")  # False
"""

from __future__ import annotations

import re
from typing import Final

ID_PATTERN: Final = r"^[A-Za-z0-9._:@-]{1,64}$"  # for pydantic and the OpenAPI document
ARTIFACT_NAME_PATTERN: Final = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"
ID_RULE: Final = "1-64 of [A-Za-z0-9._:@-]"
# Task and query ids that name routes (/v1/tasks/lease, /v1/queries/batch, ...): a job
# called so could never be read (GET /v1/tasks/lease is the lease route's 405).
RESERVED_JOB_IDS: Final = ("batch", "lease", "redrive", "results", "start")
ARTIFACT_NAME_RULE: Final = "1-128 of [A-Za-z0-9._-], not starting with a dot"

_ID: Final = re.compile(r"[A-Za-z0-9._:@-]{1,64}")
_ARTIFACT_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def is_id(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def is_artifact_name(value: object) -> bool:
    return isinstance(value, str) and _ARTIFACT_NAME.fullmatch(value) is not None
