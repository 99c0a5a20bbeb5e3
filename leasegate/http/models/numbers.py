"""Integers a caller writes as text (a query string, a form, a header): ASCII digits;
and in a JSON body, integers as JSON Schema means them (:data:`INTEGRAL`).

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


def _integral(value: object) -> object:
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# For a JSON body's integer (money, counts), placed after its Field as ASCII_DIGITS is.
# An integer is a value, as JSON Schema's "integer" is, so 100, 100.0 and 1e2 are all
# 100 (the document says "integer", and a validator takes 100.0 for one); true, "100"
# and 100.5 are not integers (StrictInt's 400):
#     amount: Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT), INTEGRAL]
INTEGRAL = BeforeValidator(_integral)
