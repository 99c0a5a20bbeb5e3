"""Write the blocking SDK, ``leasegate/client/_sync/``, from its one source, ``_async/``.

    python scripts/sync_sdk.py          # write the generated modules again
    python scripts/sync_sdk.py --check  # exit 1 if one is not what this would write

unasync (python-trio's) drops ``async`` and ``await`` and renames tokens by the
table below: what each async name is on the blocking side. Then ruff sorts the
imports (a rename can change their order). Each generated module starts with a
line saying where it comes from. ``backend.py`` is written by hand on each side:
its names are the same, and each side's modules import their own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "leasegate" / "client" / "_async"
TARGET = ROOT / "leasegate" / "client" / "_sync"
HAND_WRITTEN = frozenset({"backend.py"})

REPLACEMENTS = {
    "_async": "_sync",  # the package: each side imports its own backend and modules
    "AsyncClient": "Client",  # httpx's
    "AsyncClientBase": "ClientBase",
    "AsyncBaseTransport": "BaseTransport",
    "AsyncHTTP": "SyncHTTP",
    "AsyncWorker": "Worker",
    "AsyncJob": "Job",
    "AsyncHandler": "Handler",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
}

HEADER = "# Generated from leasegate/client/_async/{name} by scripts/sync_sdk.py: do not edit.\n"


def sources() -> list[Path]:
    return sorted(p for p in SOURCE.glob("*.py") if p.name not in HAND_WRITTEN)


def generated() -> dict[str, str]:
    """The text of each generated module, by file name."""
    with tempfile.TemporaryDirectory() as scratch:
        source_dir = Path(scratch) / "_async"
        source_dir.mkdir()
        copies = []
        for source in sources():
            copy = source_dir / source.name
            copy.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
            copies.append(str(copy))
        rule = unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)
        unasync.unasync_files(copies, [rule])
        return {source.name: _sorted_imports(
                    source.name, (Path(scratch) / "_sync" / source.name).read_text("utf-8"))
                for source in sources()}


def _sorted_imports(name: str, text: str) -> str:
    """``text`` with its imports sorted as ruff's isort wants them (ruff's own output)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--fix", "--select", "I", "--quiet",
         # First party whether or not the module is there yet (ruff looks for it).
         "--config", "lint.isort.known-first-party = ['leasegate']",
         "--stdin-filename", str(TARGET / name), "-"],
        input=text, capture_output=True, text=True, check=False, cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"ruff could not sort the imports of _sync/{name}:\n{done.stderr}")
    return HEADER.format(name=name) + done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a generated module is not current")
    args = parser.parse_args()
    wanted = generated()
    present = {p.name for p in TARGET.glob("*.py") if p.name not in HAND_WRITTEN}
    stale = sorted(name for name, text in wanted.items()
                   if not (TARGET / name).exists()
                   or (TARGET / name).read_text(encoding="utf-8") != text)
    extra = sorted(present - set(wanted))
    if args.check:
        if stale or extra:
            print(f"leasegate/client/_sync/ is not generated from _async/: {stale + extra} "
                  "differ. Edit _async/ (never _sync/), then run "
                  "`.venv/bin/python scripts/sync_sdk.py`.", file=sys.stderr)
            return 1
        return 0
    for name in stale:
        (TARGET / name).write_text(wanted[name], encoding="utf-8")
        print(f"wrote leasegate/client/_sync/{name}")
    for name in extra:
        (TARGET / name).unlink()
        print(f"removed leasegate/client/_sync/{name} (no source in _async/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
