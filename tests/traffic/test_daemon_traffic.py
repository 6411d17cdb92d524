"""The daemon with a ``traffic:`` section and no target (observe only): Envoy from the wheel in front of
the simulator, a few user streams through it, and the ``fluidity_traffic_*`` families on /metrics with
the right counts; stopping the daemon (the observer with it) leaves traffic flowing."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from exporter.app import Daemon
from exporter.settings import parse_config
from exporter.sim import SimServer
from tests.support.daemon import get, samples, serving, value
from tests.support.envoy import envoy_binary
from tests.support.envoy_proxy import running_envoy
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.timeout(90)
STREAMS = 3
MAX_TOKENS = 10


def observe_only(model: str, port: int) -> str:
    return (
        'global: {listen_address: "127.0.0.1:0"}\n'
        f'traffic: {{ext_proc_address: "127.0.0.1:{port}", models: [{model}]}}\n'
    )


async def stream(session: aiohttp.ClientSession, envoy: str, model: str) -> bytes:
    body = {"model": model, "prompt": "hello", "max_tokens": MAX_TOKENS, "stream": True}
    async with session.post(f"{envoy}/v1/completions", json=body) as response:
        assert response.status == 200
        return await response.read()


async def test_observed_streams_show_on_metrics(sim: SimServer, tmp_path: Path) -> None:
    envoy_binary()
    model, port = sim.resolved.model, free_port()
    daemon = Daemon(parse_config(observe_only(model, port)))
    async with running_envoy(sim.url, port, tmp_path) as envoy, aiohttp.ClientSession() as session:
        async with serving(daemon) as url:
            for _ in range(STREAMS):
                assert (await stream(session, envoy, model)).endswith(b"data: [DONE]\n\n")
            async with session.get(f"{envoy}/health") as response:  # another route: counted apart
                assert response.status in (200, 404)

            async def counted() -> bool:
                text = (await get(f"{url}/metrics"))[1]
                series = samples(text)
                key = (
                    "fluidity_traffic_requests_total",
                    (("api", "completions"), ("model", model), ("outcome", "ok")),
                )
                return series.get(key) == STREAMS and value(series, "fluidity_traffic_streams_in_flight") == 0

            await wait_for(counted, timeout=20)
            series = samples((await get(f"{url}/metrics"))[1])
        labels = {"model": model, "api": "completions"}
        assert value(series, "fluidity_traffic_ttft_seconds_count", **labels) == STREAMS
        assert value(series, "fluidity_traffic_tbt_seconds_count", **labels) == STREAMS * (MAX_TOKENS - 1)
        for tier in ("strict", "medium", "relaxed"):
            assert value(series, "fluidity_traffic_fluidity_index_count", tier=tier, **labels) == STREAMS
        assert value(series, "fluidity_traffic_requests_total", outcome="stream_aborted", **labels) == 0
        assert value(series, "fluidity_traffic_streams_skipped_total", reason="not_llm") == 1
        # The daemon, and its observer, stopped: Envoy goes on without it (failure_mode_allow).
        for _ in range(STREAMS):
            assert (await stream(session, envoy, model)).endswith(b"data: [DONE]\n\n")
