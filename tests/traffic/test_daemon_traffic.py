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
        assert value(series, "fluidity_traffic_tpot_seconds_count", **labels) == STREAMS
        assert value(series, "fluidity_traffic_e2e_seconds_count", **labels) == STREAMS
        assert value(series, "fluidity_traffic_output_tokens_total", token_source="chunks", **labels) == (
            STREAMS * MAX_TOKENS
        )
        assert value(series, "fluidity_traffic_prompt_tokens_total", source="estimated", **labels) > 0
        assert (
            value(series, "fluidity_traffic_window_requests", window="5m", outcome="ok", **labels) == STREAMS
        )
        ends = {
            end: value(series, "fluidity_traffic_envoy_streams_total", state=end)
            for end in ("observed", "unreliable")
        }
        assert (
            sum(ends.values()) == STREAMS
            and value(series, "fluidity_traffic_envoy_streams_total", state="not_llm") == 1
        )
        assert value(series, "fluidity_traffic_last_message_timestamp_seconds") > 1.7e9
        # The daemon, and its observer, stopped: Envoy goes on without it (failure_mode_allow).
        for _ in range(STREAMS):
            assert (await stream(session, envoy, model)).endswith(b"data: [DONE]\n\n")


def probing_through_envoy(envoy: str, port: int) -> str:
    return (
        'global: {listen_address: "127.0.0.1:0", windows: [1m]}\n'
        f"targets:\n  - {{name: sim, url: {envoy}, api: completions}}\n"
        "modules:\n  every_second:\n"
        '    workload: {prompt_tokens: "fixed:32", output_tokens: "fixed:12"}\n'
        "    requests_per_run: 2\n    schedule: {interval: 1s}\n"
        f'traffic: {{ext_proc_address: "127.0.0.1:{port}"}}\n'
    )


async def test_the_observer_s_view_of_each_probe_is_compared_with_its_client(
    sim: SimServer, tmp_path: Path
) -> None:
    envoy_binary()
    port = free_port()
    async with running_envoy(sim.url, port, tmp_path) as envoy:
        daemon = Daemon(parse_config(probing_through_envoy(envoy, port)))
        async with serving(daemon) as url:

            async def compared() -> bool:
                series = samples((await get(f"{url}/metrics"))[1])
                return value(series, "fluidity_traffic_probe_requests_compared_total") >= 4

            await wait_for(compared, timeout=40)
            series = samples((await get(f"{url}/metrics"))[1])
    compared_total = value(series, "fluidity_traffic_probe_requests_compared_total")
    gaps = value(series, "fluidity_traffic_probe_gap_difference_seconds_count")
    assert gaps == compared_total * 11  # 12 tokens of one chunk each: 11 gaps per request
    # One process stamps both views: the client each socket read, the observer each message of Envoy's.
    # On a busy 2-core VM most gaps still agree within 2.5 ms.
    close = value(series, "fluidity_traffic_probe_gap_difference_seconds_bucket", le="0.0025")
    assert close >= 0.5 * gaps
    assert value(series, "fluidity_traffic_probe_unmatched_total", side="observer") == 0
    assert value(series, "fluidity_traffic_envoy_streams_total", state="probe") >= compared_total
    # The probes are kept out of the users' families: no user series at all.
    assert not [key for key in series if key[0] == "fluidity_traffic_requests_total"]
