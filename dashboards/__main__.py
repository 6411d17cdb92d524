"""``python -m dashboards``: regenerate the committed JSON of every dashboard source;
``python -m dashboards --check``: write nothing, exit 1 and list the stale files (CI)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from dashboards import build


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale JSON files; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = build.stale()
        for path in stale:
            print(f"stale: {shown(path)} (regenerate with: python -m dashboards)", file=sys.stderr)
        return 1 if stale else 0
    for path in build.write():
        print(f"wrote {shown(path)}")
    return 0


def shown(path: Path) -> str:
    """``path`` relative to the working directory, as a user typed it."""
    return os.path.relpath(path)


if __name__ == "__main__":
    sys.exit(main())
