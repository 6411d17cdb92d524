"""``fluidity-exporter shard``: serve as one shard of a sharded load, for a coordinator over HTTP.

What a local worker process and a pod of the Kubernetes Indexed Job both run: it polls the coordinator
(the daemon during a sharded capacity search, or a CLI command with ``--workers``) for its slice of each
trial, sends it and streams the results back (``exporter.load.shards.worker``), until the coordinator
says it is done or nothing came for ``--idle-exit`` seconds. In an Indexed Job the shard number is the
pod's ``JOB_COMPLETION_INDEX``. The coordinator's token and the target's API key are read from files
(``--token-file``, ``--api-key-file``: a pod's mounted Secret, a local worker's inherited pipe), else from
the environment (``FLUIDITY_SHARD_TOKEN``, ``FLUIDITY_SHARD_API_KEY``), never from the command line: a
variable is inherited by every process the shard's parent starts, a file is read by whoever opens it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from exporter.cli.command import Command
from exporter.load.shards.tasks import API_KEY_ENV, TOKEN_ENV
from exporter.load.shards.worker import serve_shard
from exporter.probe import loop as event_loop
from exporter.settings.addresses import check_url
from exporter.settings.reader import show
from exporter.streams.request import Secret

INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in every pod of an Indexed Job
COORDINATOR_ENV = "FLUIDITY_SHARD_COORDINATOR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``shard``."""
    parser.add_argument(
        "--coordinator", default=os.environ.get(COORDINATOR_ENV),
        help=f"the coordinator's base URL, e.g. http://fluidity-exporter-shards:9469 (${COORDINATOR_ENV})",
    )  # fmt: skip
    parser.add_argument(
        "--shard", type=int, default=None, help=f"this shard's number, 0 to K-1 (default ${INDEX_ENV})"
    )
    parser.add_argument(
        "--token-file", help=f"file holding the coordinator's token (default ${TOKEN_ENV}, the value itself)"
    )
    parser.add_argument(
        "--api-key-file", help=f"file holding the target's API key (default ${API_KEY_ENV}, the value itself)"
    )
    parser.add_argument(
        "--idle-exit", type=float, default=600.0, help="exit after this many seconds without a task (600)"
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the coordinator let the shard go (or it idled out), 1 if never reached, 2 on bad input
    or when the coordinator refused it (a wrong token, another protocol version)."""
    try:
        url, shard = _checked(args)
        token = _secret(args.token_file, "--token-file", TOKEN_ENV)
        api_key = _secret(args.api_key_file, "--api-key-file", API_KEY_ENV)
    except ValueError as exc:
        print(f"fluidity-exporter shard: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s shard %(levelname)s %(message)s")
    shown = token.reveal() if token is not None else None
    return event_loop.run(serve_shard(url, shard, shown, api_key, idle_exit_s=args.idle_exit))


def _secret(path: str | None, flag: str, env: str) -> Secret | None:
    """The secret in the file at ``path``, else in the variable ``env``; None when neither holds one."""
    if path is None:
        value = os.environ.get(env, "").strip()
        return Secret(value) if value else None
    try:
        return Secret.from_file(path)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def _checked(args: argparse.Namespace) -> tuple[str, int]:
    """The coordinator's URL and the shard number, checked before the first poll: a URL that is no URL
    was retried without a word until ``--idle-exit``."""
    shard = args.shard if args.shard is not None else os.environ.get(INDEX_ENV)
    if not args.coordinator or shard is None:
        raise ValueError(f"needs --coordinator (or ${COORDINATOR_ENV}) and --shard (or ${INDEX_ENV})")
    try:
        url = check_url(args.coordinator)
    except ValueError as exc:
        raise ValueError(f"--coordinator (or ${COORDINATOR_ENV}): {exc}") from None
    if not str(shard).isdigit():
        raise ValueError(f"--shard (or ${INDEX_ENV}): must be an integer >= 0, got {show(str(shard))}")
    return url, int(shard)


SHARD_COMMAND = Command(
    "serve as one shard of a sharded load (a worker process or a Job's pod)", add_arguments, run
)
