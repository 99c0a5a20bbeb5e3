"""Field rules an actor checks on every message it is sent (``Message.check``).

The HTTP edge validates requests first, but an actor defends its own
invariants: a value sent straight to it that breaks a rule is a domain error
(400), never an SQLite CHECK failure or an overflow that takes it down::

    def check(self) -> None:
        check_id("task_id", self.task_id)
        check_int("priority", self.priority, 0, 9)
        check_choice("outcome", self.outcome, TaskOutcome)
"""

from __future__ import annotations

import functools
from typing import Any, get_args

from leasegate.actors.payloads import canonical_json, stored_json
from leasegate.errors import InvalidRequest
from leasegate.ids import ID_RULE, RESERVED_JOB_IDS, is_id
from leasegate.settings import MAX_AMOUNT as MAX_AMOUNT  # minor units; exact in JSON too

INT32 = 2**31 - 1
MAX_TEXT = 4096
MAX_TOKEN = 128


def check_id(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not is_id(value):
        raise InvalidRequest(f"{name} must be {ID_RULE} (got {value!r:.80})")


def check_tenant(name: str, value: object, *, optional: bool = False) -> None:
    """A tenant, whose ledger account has its name: an id that does not name one of
    the ledger's system accounts (``@world``, ``@holds``, ``@revenue``: names starting
    with @)."""
    check_id(name, value, optional=optional)
    if isinstance(value, str) and value.startswith("@"):
        raise InvalidRequest(f"{name} {value!r} names a system account of the ledger "
                             "(names starting with @), not a tenant's")


def check_job_id(name: str, value: object) -> None:
    """A client-chosen task or query id (None: the server picks one)."""
    check_id(name, value, optional=True)
    if value in RESERVED_JOB_IDS:
        raise InvalidRequest(f"{name} {value!r} is reserved (it names a route; so do "
                             f"{', '.join(RESERVED_JOB_IDS)})")


def check_ids(name: str, values: tuple[str, ...] | None, *, most: int = 100,
              optional: bool = True) -> None:
    if values is None and optional:
        return
    if not isinstance(values, tuple) or len(values) > most:
        raise InvalidRequest(f"{name} must be at most {most} ids")
    for value in values:
        check_id(name, value)


def check_int(name: str, value: object, low: int, high: int, *,
              optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be an integer {low}-{high} (got {value!r:.40})")


def check_number(name: str, value: object, low: float, high: float, *,
                 optional: bool = False) -> None:
    if value is None and optional:
        return
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not low <= value <= high):  # NaN fails both comparisons
        raise InvalidRequest(f"{name} must be a number {low:g}-{high:g} (got {value!r:.40})")


def check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):  # a truthy string must not keep a caller waiting for ever
        raise InvalidRequest(f"{name} must be true or false (got {value!r:.40})")


def check_choice(name: str, value: object, choices: Any, *, optional: bool = False) -> None:
    """``choices`` is a ``Literal`` type: the one definition the HTTP models use too."""
    if value is None and optional:
        return
    allowed = get_args(choices)
    if value not in allowed:
        raise InvalidRequest(f"{name} must be one of {', '.join(map(str, allowed))} "
                             f"(got {value!r:.40})")


def check_text(name: str, value: object, *, optional: bool = False, most: int = MAX_TEXT,
               empty: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or len(value) > most or (not empty and not value):
        raise InvalidRequest(f"{name} must be text of {0 if empty else 1}-{most} characters")
    if "\x00" in value:  # PostgreSQL cannot store it; the same refusal on both engines
        raise InvalidRequest(f"{name} must not hold a NUL character")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # an unpaired surrogate: SQLite and JSON refuse it later
            raise InvalidRequest(f"{name} must be valid Unicode text") from None


def check_json(name: str, value: object, *, optional: bool = True,
               object_only: bool = False) -> str | None:
    """A payload we store and hand out again must be JSON (no NaN, no unpaired
    surrogates, not nested past the encoder's limits): its canonical text (None for an
    optional None)."""
    if value is None and optional:
        return None
    if object_only and not isinstance(value, dict):
        raise InvalidRequest(f"{name} must be a JSON object")
    try:
        text = canonical_json(value)
        text.encode()
    except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
        raise InvalidRequest(f"{name} is not a JSON value that can be stored") from None
    return text


def keep_text(message: object, name: str, text: str | None) -> None:
    """Keep ``text``, the canonical JSON a check made of a payload, as the message's
    cached property ``name`` (:func:`stored_text`, or a ``functools.cached_property``),
    so that its handler, which stores that text and digests it, does not make it
    again."""
    vars(message)[name] = text


def stored_text(payload: str) -> functools.cached_property[str | None]:
    """A message's optional ``payload`` field as it is stored (canonical JSON; None for
    None), made once: by its check (:func:`keep_text`), else on first use::

        result_text = stored_text("result")
    """
    return functools.cached_property(lambda message: stored_json(getattr(message, payload)))


def check_leases(leases: object) -> None:
    """``((job_id, lease_token), ...)``, as a give-back message carries them."""
    if not isinstance(leases, tuple) or len(leases) > 1000:
        raise InvalidRequest("leases must be at most 1000 (id, token) pairs")
    for pair in leases:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise InvalidRequest("leases must be (id, token) pairs")
        check_id("id", pair[0])
        check_text("lease_token", pair[1], most=MAX_TOKEN, empty=False)
