"""A handler's exception as the SDK reports it: type, message and a traceback bounded
to 8 KiB, cut at line boundaries, saying what it cut."""

from __future__ import annotations

from leasegate.client._exceptions import MAX_TRACEBACK_BYTES, bounded, error_detail


class OutOfStock(Exception):
    pass


def _deep(n: int) -> None:
    if n == 0:
        raise OutOfStock("sku-1 " + "é" * 10)
    _deeper(n - 1)  # two functions in turn: Python folds one repeated frame, not these


def _deeper(n: int) -> None:
    _deep(n)


def test_a_deep_traceback_keeps_its_start_and_its_end_and_says_what_was_cut() -> None:
    try:
        _deep(400)
    except OutOfStock as raised:
        detail = error_detail(raised)
    assert detail["type"] == "tests.test_sdk_errors.OutOfStock"
    assert detail["message"] == "sku-1 " + "é" * 10
    text = detail["traceback"]
    assert len(text.encode()) <= MAX_TRACEBACK_BYTES
    lines = text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith("  [… ") and "lines cut: a traceback is sent up to 8192" in lines[1]
    assert len(text.encode()) > MAX_TRACEBACK_BYTES - 300  # cut, not emptied
    assert lines[-1] == "tests.test_sdk_errors.OutOfStock: sku-1 " + "é" * 10
    assert all(line.startswith(("  File", "    ", "tests.")) for line in lines[2:])


def test_a_short_traceback_is_sent_whole_and_a_huge_last_line_is_cut() -> None:
    assert bounded("Traceback\n  File x\nE: y\n") == "Traceback\n  File x\nE: y\n"
    huge = bounded("Traceback\n" + "E: " + "x" * 20_000 + "\n")
    assert len(huge.encode()) <= MAX_TRACEBACK_BYTES
    assert huge.startswith("Traceback\n  [… 0 lines cut") and huge.endswith("x…\n")


def test_an_exception_without_a_message_is_named_by_its_type() -> None:
    try:
        raise NotImplementedError
    except NotImplementedError as raised:
        detail = error_detail(raised)
    assert (detail["type"], detail["message"]) == ("NotImplementedError",
                                                   "raised without a message")


def test_a_traceback_of_one_long_line_or_a_long_first_line_is_bounded_too() -> None:
    for text in ("E: " + "x" * 20_000, "E: " + "é" * 20_000 + "\n  more\nE: y\n"):
        cut = bounded(text)
        assert len(cut.encode()) <= MAX_TRACEBACK_BYTES
        assert cut.endswith(("x…\n", "E: y\n")) and "E: " in cut
    detail = error_detail(ValueError("x" * 20_000))  # made, never raised: no traceback
    assert len(detail["traceback"].encode()) <= MAX_TRACEBACK_BYTES
