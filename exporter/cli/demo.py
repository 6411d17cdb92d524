"""``fluidity-exporter demo``: the metric core on the simulated engine, no GPU and no network.

Runs one workload through the built-in engine model twice, with whole and with chunked prefills
(``exporter.sim.demo``), and prints the figures side by side: conventional metrics barely tell the two
apart, the fluidity-index and the fluid token rate do (the Etalon paper's section 5.2).

``--traffic`` instead runs the traffic observer live on this machine (``exporter.cli.demo_traffic``): the
simulator, a real Envoy in front of it, the exporter observing a little user traffic through it.
"""

from __future__ import annotations

import argparse

from exporter.cli.command import EXIT_USAGE, Command
from exporter.cli.flags import DeprecatedAlias, error
from exporter.sim.demo import SCHEDULING_SLACK_S, Comparison, Workload, compare_prefill_modes
from exporter.sim.engine_presets import PRESETS
from exporter.sim.process import DEFAULT_PRESET

DEFAULT_LISTEN = "127.0.0.1:9468"
DEFAULT_ENVOY_PORT = 10000  # Envoy's own examples' port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the demo command."""
    parser.add_argument(
        "--sim-preset",
        dest="preset",
        default=DEFAULT_PRESET,
        choices=sorted(PRESETS),
        help=f"the simulated engine's model, as for run, bench, capacity and profile (default {DEFAULT_PRESET})",
    )
    parser.add_argument(
        "--preset", action=DeprecatedAlias, use="--sim-preset", dest="preset", choices=sorted(PRESETS)
    )
    parser.add_argument("--requests", type=int, default=400, help="requests in the workload (default 400)")
    parser.add_argument("--rate", type=float, default=10.0, help="Poisson arrival rate, req/s (default 10)")
    parser.add_argument("--seed", type=int, default=1)
    live = parser.add_argument_group("--traffic: real traffic through a local Envoy, served until Ctrl-C")
    live.add_argument(
        "--traffic",
        action="store_true",
        help="run the simulator, a real Envoy in front of it and the exporter observing user traffic "
        "through it (needs the traffic and envoy extras)",
    )
    live.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"the exporter's /metrics (default {DEFAULT_LISTEN}; port 0: any free port)",
    )
    live.add_argument(
        "--envoy-port",
        type=int,
        default=DEFAULT_ENVOY_PORT,
        metavar="PORT",
        help=f"Envoy's port for user traffic, on loopback (default {DEFAULT_ENVOY_PORT}; 0: any free port)",
    )
    live.add_argument(
        "--duration",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop after this long (default: Ctrl-C)",
    )


def run(args: argparse.Namespace) -> int:
    """Simulate, compute and print the comparison table (or, with ``--traffic``, run the live demo)."""
    if args.traffic:
        if args.duration < 0 or not 0 <= args.envoy_port <= 65535:
            error("demo", f"--duration must be >= 0 and --envoy-port 0-65535, got {args.duration:g}")
            return EXIT_USAGE
        from exporter.cli.demo_traffic import run as run_traffic  # aiohttp, the daemon: only when asked

        return run_traffic(args)
    if args.requests < 1 or args.rate <= 0:  # usage, as every command's (it exited 1)
        error("demo", f"--requests must be >= 1 and --rate > 0, got {args.requests} and {args.rate:g}")
        return EXIT_USAGE
    preset = PRESETS[args.preset]
    comparison = compare_prefill_modes(preset, Workload(args.requests, args.rate, args.seed))
    print(f"{preset.description}: {args.requests} requests at {args.rate} req/s (Poisson, seed {args.seed})")
    print(
        f"prefill deadline: profiled TTFT(P) + {SCHEDULING_SLACK_S} s; e.g. Dp(4096) = "
        f"{comparison.model.deadline(4096.0, SCHEDULING_SLACK_S):.3f} s\n"
    )
    print(_table(comparison))
    return 0


def _table(comparison: Comparison) -> str:
    columns = comparison.columns
    names = list(columns)
    width = max(len(row) for row in columns[names[0]])
    lines = [f"{'':{width}}  {names[0]:>22}  {names[1]:>22}"]
    lines += [
        f"{row:{width}}  {columns[names[0]][row]:>22}  {columns[names[1]][row]:>22}"
        for row in columns[names[0]]
    ]
    return "\n".join(lines)


DEMO_COMMAND = Command(
    "show Etalon's metrics on the simulated engine, with and without chunked prefill", add_arguments, run
)
