"""The local-process backend of the shard protocol: K ``fluidity-exporter shard`` processes on this machine.

Each is a fresh interpreter (no inherited event loop, sockets or threads) running exactly what a
Kubernetes shard pod runs, pointed at a coordinator on loopback. The target's API key and the
coordinator's token reach it as a pod's do, as files: each is a pipe it inherits, named on its command
line as ``--token-file /dev/fd/N`` (the path, not the secret), read once and empty after. Not the
environment: every process a shard started would inherit that, and ``/proc/<pid>/environ`` keeps it
for the process's life.
``local_shards`` starts a coordinator (``ShardPool``) on 127.0.0.1, the processes, waits until each has
reached it, and on exit tells them to leave and reaps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator

from exporter.load.shards.pool import ShardPool
from exporter.load.shards.tasks import API_KEY_ENV, TOKEN_ENV
from exporter.settings.shards import PoolSettings
from exporter.streams.request import Secret

REGISTER_TIMEOUT_S = 60.0  # interpreter start-up and imports, on a loaded machine
EXIT_WAIT_S = 5.0


class LocalShards:
    """``count`` shard processes serving the coordinator at ``url``."""

    def __init__(self, count: int, url: str, token: str, api_key: Secret | None) -> None:
        self.count, self.url, self.token, self.api_key = count, url, token, api_key
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        # A stray variable of the parent's must not stand in for a secret the shard is not given.
        env = {name: value for name, value in os.environ.items() if name not in (TOKEN_ENV, API_KEY_ENV)}
        secrets = {"--token-file": self.token}
        if self.api_key is not None:
            secrets["--api-key-file"] = self.api_key.reveal()
        for shard in range(self.count):
            command = [
                sys.executable,
                "-m",
                "exporter",
                "shard",
                "--coordinator",
                self.url,
                "--shard",
                str(shard),
            ]
            pipes: list[int] = []
            try:
                for flag, secret in secrets.items():
                    pipes.append(pipe_holding(secret))
                    command += [flag, f"/dev/fd/{pipes[-1]}"]
                self.procs.append(
                    subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, pass_fds=pipes)
                )
            finally:
                for pipe in pipes:  # the child holds its own copies
                    os.close(pipe)

    def gone(self, shard: int) -> str | None:
        """Why shard ``shard``'s process is gone (its exit code), or None while it runs."""
        code = self.procs[shard].poll() if shard < len(self.procs) else None
        return None if code is None else f"exit code {code}"

    def stop(self) -> None:
        """Wait a moment for each to leave (the coordinator told them), then terminate the rest."""
        for proc in self.procs:
            try:
                proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=EXIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def pipe_holding(secret: str) -> int:
    """The read end of a pipe holding ``secret``, its write end closed (so a read ends at the secret's
    end). Written whole before the reader starts: a secret longer than the pipe holds (64 KiB on Linux,
    at least 4 KiB) is refused rather than blocking."""
    read, write = os.pipe()
    data = secret.encode()
    try:
        os.set_blocking(write, False)
        written = os.write(write, data)
    except BlockingIOError:
        written = 0
    finally:
        os.close(write)
    if written < len(data):
        os.close(read)
        raise ValueError(f"a secret of {len(data)} bytes is longer than a pipe to a shard process holds")
    return read


@contextlib.asynccontextmanager
async def local_shards(
    count: int, api_key: Secret | None, settings: PoolSettings | None = None
) -> AsyncIterator[ShardPool]:
    """A coordinator on loopback with ``count`` local shard processes, all registered."""
    token = secrets.token_urlsafe(24)
    pool = ShardPool(count, token, settings)
    shards = LocalShards(count, await pool.start("127.0.0.1", 0), token, api_key)
    pool.alive = shards.gone
    try:
        shards.start()
        await pool.wait_registered(REGISTER_TIMEOUT_S)
        yield pool
    finally:
        await pool.close()
        await _reap(shards)


async def _reap(shards: LocalShards) -> None:
    await asyncio.to_thread(shards.stop)
