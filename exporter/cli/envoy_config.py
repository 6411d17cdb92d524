"""``fluidity-exporter envoy-config``: print (or write) the Envoy bootstrap that puts the traffic observer
beside an engine: ``--upstream`` the engine's URL, ``--listen`` where Envoy takes user traffic,
``--observer`` the observer's gRPC address (the config's ``traffic.ext_proc_address``). Exit 0, or 2 for
a bad flag (the message names it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.cli.command import EXIT_MEASURED, EXIT_USAGE, Command
from exporter.traffic.envoy_config import DEFAULT_ADMIN, Endpoint, Upstream, bootstrap, render


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``envoy-config``."""
    parser.add_argument(
        "--upstream", required=True, metavar="URL", help="the engine, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="where Envoy takes user traffic")
    parser.add_argument(
        "--observer",
        required=True,
        metavar="HOST:PORT",
        help="the observer's gRPC address (traffic.ext_proc_address)",
    )
    parser.add_argument(
        "--admin",
        default=DEFAULT_ADMIN,
        metavar="HOST:PORT",
        help=f"Envoy's admin interface (default {DEFAULT_ADMIN})",
    )
    parser.add_argument("--output", metavar="FILE", help="write the bootstrap to FILE instead of printing it")


def build(args: argparse.Namespace) -> str:
    """The rendered bootstrap; ``ValueError`` naming the flag for a bad value."""
    return render(
        bootstrap(
            Upstream.of_url(args.upstream),
            Endpoint.of_listen(args.listen, "--listen"),
            Endpoint.of_listen(args.observer, "--observer"),
            Endpoint.of_listen(args.admin, "--admin"),
        )
    )


def run(args: argparse.Namespace) -> int:
    """Print or write the bootstrap."""
    try:
        text = build(args)
    except ValueError as exc:
        print(f"envoy-config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_MEASURED
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        print(f"envoy-config: cannot write --output {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_MEASURED


ENVOY_CONFIG_COMMAND = Command(
    help="print the Envoy bootstrap (ext_proc in observability mode) that feeds real traffic to the observer",
    add_arguments=add_arguments,
    run=run,
)
