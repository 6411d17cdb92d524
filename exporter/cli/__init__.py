"""Command-line entry point: ``fluidity-exporter <command>``; ``argparse`` lives only in this package.

Each command lives in its own module (``run``, ``bench``, ``capacity``, ``profile``, ``check_config``,
``demo``, ``sim``, ``shard``, ``envoy_config``) and registers here as a ``Command``: a function that adds
its flags to a sub-parser and a function that runs it and returns the process exit code. The flag groups
several commands share are in ``flags``. A command is thin: it parses, calls the layer below, and prints. This
module only dispatches; it holds no logic of its own.

Exit codes, the same for ``bench``, ``capacity`` and ``profile`` (docs/cli.md "Exit codes"): 0 the target
was measured and the measurement is reliable; 1 the target failed (did not answer, every request or
every trial failed) or the measurement is not reliable; 2 usage or config (a bad flag, a bad file, an
output folder that would be overwritten). A usage error (argparse's) exits 2 for every command; past
that, ``check-config`` and ``run`` exit 0 or 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from exporter import __version__
from exporter.cli.command import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MEASURED, EXIT_USAGE, Command

__all__ = ["EXIT_FAILED", "EXIT_MEASURED", "EXIT_USAGE", "Command", "build_parser", "main"]


def _commands() -> dict[str, Command]:
    # Imported lazily so that `fluidity-exporter --help` stays fast.
    from exporter.cli.bench import BENCH_COMMAND
    from exporter.cli.capacity import CAPACITY_COMMAND
    from exporter.cli.check_config import CHECK_CONFIG_COMMAND
    from exporter.cli.demo import DEMO_COMMAND
    from exporter.cli.envoy_config import ENVOY_CONFIG_COMMAND
    from exporter.cli.profile import PROFILE_COMMAND
    from exporter.cli.run import RUN_COMMAND
    from exporter.cli.shard import SHARD_COMMAND
    from exporter.cli.sim import SIM_COMMAND

    return {
        "run": RUN_COMMAND,
        "bench": BENCH_COMMAND,
        "capacity": CAPACITY_COMMAND,
        "profile": PROFILE_COMMAND,
        "check-config": CHECK_CONFIG_COMMAND,
        "demo": DEMO_COMMAND,
        "sim": SIM_COMMAND,
        "shard": SHARD_COMMAND,
        "envoy-config": ENVOY_CONFIG_COMMAND,
    }


class _TopParser(argparse.ArgumentParser):
    """The top-level parser: a flag no command knows is that command's usage error, with its usage
    (argparse says it with the top-level usage, which names no flag of the command)."""

    commands: dict[str, argparse.ArgumentParser]

    def parse_args(  # type: ignore[override]  # one form of argparse's overloads is enough here
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.commands[parsed.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per registered command."""
    parser = _TopParser(
        prog="fluidity-exporter",
        description="Measure what users of an LLM endpoint feel: Etalon fluidity-index, fluid token rate, "
        "TTFT/TBT/TPOT.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = {}
    for name, command in commands.items():
        parser.commands[name] = sub.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(parser.commands[name])
    return parser


# Commands that serve until told to stop handle these signals in their event loop (a clean shutdown).
SERVING_COMMANDS = ("run", "sim", "shard")
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a ``timeout``, a cancelled CI job, a container stop) ends a one-shot command
    the way Ctrl-C does: a ``KeyboardInterrupt``, so every cleanup that Ctrl-C runs (the simulator child,
    the worker processes) runs for it too. They once kept running, the workers still sending load."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the exit code."""
    commands = _commands()
    args = build_parser(commands).parse_args(argv)
    from exporter.probe.client import TargetError

    serving = args.command in SERVING_COMMANDS
    previous = (
        {} if serving else {signum: signal.signal(signum, _terminate) for signum in TERMINATING_SIGNALS}
    )
    try:
        return commands[args.command].run(args)
    except Terminated as exc:
        name = signal.Signals(exc.signum).name
        print(f"fluidity-exporter {args.command}: {name}: stopped at once, nothing written", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"fluidity-exporter {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except TargetError as exc:  # e.g. GET /v1/models failed: the target is down, not our bug
        print(f"fluidity-exporter {args.command}: error: {exc.explain()}", file=sys.stderr)
        return 1
    finally:
        for signum, handler in previous.items():  # main() may run inside another program (the tests)
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
