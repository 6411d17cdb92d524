"""Command-line entry point: ``fluidity-exporter <command>``.

Each command lives in its own module and registers here as a ``Command``: a function that adds its
arguments to a sub-parser and a function that runs it and returns the process exit code. This module
only dispatches; it holds no logic of its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporter import __version__


@dataclass(frozen=True)
class Command:
    """One sub-command: its help line, how it adds its flags, and what it runs."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _commands() -> dict[str, Command]:
    # Imported lazily so that `fluidity-exporter --help` stays fast.
    from exporter.config.check import CHECK_CONFIG_COMMAND
    from exporter.daemon.command import RUN_COMMAND
    from exporter.demo import DEMO_COMMAND
    from exporter.jobs.capacity_command import CAPACITY_COMMAND
    from exporter.jobs.command import PROFILE_COMMAND
    from exporter.load.shard_command import SHARD_COMMAND
    from exporter.oneshot import BENCH_COMMAND
    from exporter.sim.cli import SIM_COMMAND

    return {
        "run": RUN_COMMAND,
        "bench": BENCH_COMMAND,
        "capacity": CAPACITY_COMMAND,
        "profile": PROFILE_COMMAND,
        "check-config": CHECK_CONFIG_COMMAND,
        "demo": DEMO_COMMAND,
        "sim": SIM_COMMAND,
        "shard": SHARD_COMMAND,
    }


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per registered command."""
    parser = argparse.ArgumentParser(
        prog="fluidity-exporter",
        description="Measure what users of an LLM endpoint feel: Etalon fluidity-index, fluid token rate, "
        "TTFT/TBT/TPOT.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in commands.items():
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit code."""
    commands = _commands()
    args = build_parser(commands).parse_args(argv)
    from exporter.probe.client import TargetError

    try:
        return commands[args.command].run(args)
    except KeyboardInterrupt:
        return 130
    except TargetError as exc:  # e.g. GET /v1/models failed: the target is down, not our bug
        print(f"fluidity-exporter {args.command}: error: the target did not answer: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
