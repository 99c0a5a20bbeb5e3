"""Integers a caller writes as text (a query string, a form, a header): ASCII digits.

``int()`` takes far more than a caller means: a sign, spaces, underscores, and
every script's digits ("٥", "𝟓" and "５" are 5), while ``isdigit()`` lets
through "²" and "①", which ``int()`` then refuses (a 500). Here a number is
ASCII digits alone::

    whole_number("42", 100)    # 42
    whole_number("٥", 100)     # None: the caller's 400

    limit: Annotated[int, Field(ge=1, le=500), ASCII_DIGITS] = 50   # a query model
"""

from __future__ import annotations

from pydantic import BeforeValidator


def whole_number(text: str, most: int) -> int | None:
    """``text`` as an integer 0..``most`` if it is ASCII digits alone, else None."""
    if not (text.isascii() and text.isdecimal()) or len(text) > len(str(most)):
        return None
    value = int(text)
    return value if value <= most else None


def _ascii_digits(value: object) -> object:
    if isinstance(value, str) and not (value.isascii() and value.isdecimal()):
        raise ValueError("must be a whole number in ASCII digits")
    return value


# For a query model's integer field; after its Field (placed before the Field, the
# schema shows the bounds as "ge"/"le" instead of "minimum"/"maximum").
ASCII_DIGITS = BeforeValidator(_ascii_digits)
