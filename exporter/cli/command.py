"""What every command is: a help line, a function adding its flags, a function running it; and the exit
codes they share (docs/cli.md "Exit codes")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

EXIT_MEASURED = 0
EXIT_FAILED = 1  # the target failed, or the measurement is not reliable
EXIT_USAGE = 2  # a bad flag, file or config; nothing was measured
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells say it); bench reports what it sent first


@dataclass(frozen=True)
class Command:
    """One sub-command: its help line, how it adds its flags, and what it runs."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
