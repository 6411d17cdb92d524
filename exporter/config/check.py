"""``fluidity-exporter check-config FILE...``: validate config files without starting anything.

Prints ``FILE: OK (N targets, M modules)`` for a good file, or ``FILE: N problems`` and every problem,
one per line, for a bad one; the exit code is 0 when every file is good, 1 otherwise. Secrets are read
(a missing variable is a problem) but never printed.
"""

from __future__ import annotations

import argparse
import sys

from exporter.cli import Command
from exporter.config.parse import ConfigError, load_config_file


def check_file(path: str) -> tuple[bool, list[str]]:
    """Whether the file at ``path`` is a valid config, and the lines that say so."""
    try:
        config = load_config_file(path)
    except ConfigError as exc:
        count = len(exc.problems)
        return False, [f"{path}: {count} problem{'s' if count != 1 else ''}"] + [
            f"  {problem}" for problem in exc.problems
        ]
    return True, [f"{path}: OK ({len(config.targets)} targets, {len(config.modules)} modules)"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="config files (YAML) to check")


def _run(args: argparse.Namespace) -> int:
    all_ok = True
    for path in args.files:
        ok, lines = check_file(path)
        all_ok &= ok
        print("\n".join(lines), file=sys.stdout if ok else sys.stderr)
    return 0 if all_ok else 1


CHECK_CONFIG_COMMAND = Command(
    help="check config files: print OK or every problem with its path; exit 0 or 1",
    add_arguments=_add_arguments,
    run=_run,
)
