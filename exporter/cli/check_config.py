"""``fluidity-exporter check-config FILE...``: validate config files without starting anything.

Prints ``FILE: OK (N targets, M modules)`` for a good file, or ``FILE: N problems`` and every problem,
one per line, for a bad one (``exporter.settings.check``); the exit code is 0 when every file is good, 1
otherwise. Secrets are read (a missing variable is a problem) but never printed.
"""

from __future__ import annotations

import argparse
import sys

from exporter.cli.command import Command
from exporter.load.config_workloads import CONFIG_CHECKS
from exporter.settings.check import check_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``check-config``."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="config files (YAML) to check")


def run(args: argparse.Namespace) -> int:
    """Check every file; exit 0 when each is good."""
    all_ok = True
    for path in args.files:
        ok, lines = check_file(path, checks=CONFIG_CHECKS)
        all_ok &= ok
        print("\n".join(lines), file=sys.stdout if ok else sys.stderr)
    return 0 if all_ok else 1


CHECK_CONFIG_COMMAND = Command(
    help="check config files: print OK or every problem with its path; exit 0, 1 (a bad file) or 2 (usage)",
    add_arguments=add_arguments,
    run=run,
)
