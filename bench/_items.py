"""What the per-item benches (``actor_items.py``, ``http_items.py``) share: their
options, and a warm-up then a measured pass of each channel, the measured ones
profiled with ``--profile``."""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections.abc import Callable

BATCH = 100  # items a batch message (or call) carries
CHANNELS = ("queries", "tasks")


def options(doc: str | None, rounds: int, profile_help: str) -> argparse.Namespace:
    """``--rounds`` (batches per channel), ``--only`` (one channel), ``--profile``."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds,
                        help=f"batches of {BATCH} per channel")
    parser.add_argument("--only", choices=CHANNELS, default=None)
    parser.add_argument("--profile", action="store_true", help=profile_help)
    return parser.parse_args()


def each_channel(args: argparse.Namespace, warm_up: Callable[[str], object],
                 measure: Callable[[str], str], top: int) -> int:
    """Of each channel ``args`` asks for: ``warm_up`` (imports, first statements), then
    ``measure`` (profiled with ``--profile``), and what it reports printed; then the
    profile's ``top`` functions by their own time."""
    profiler = cProfile.Profile() if args.profile else None
    for channel in CHANNELS:
        if args.only not in (None, channel):
            continue
        warm_up(channel)
        if profiler is not None:
            profiler.enable()
        report = measure(channel)
        if profiler is not None:
            profiler.disable()
        print(report)
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(top)
    return 0
