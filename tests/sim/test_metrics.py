"""``/metrics``: vLLM's names, types and buckets, parsed with prometheus_client, matching the traffic."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim import SimServer, tokenizer
from exporter.sim.metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from tests.sim.sim_helpers import completion_body, stream
from tests.support.sim import StartSim

LABELS = {"model_name": "sim-tiny", "engine": "0"}


async def scrape(session: aiohttp.ClientSession, server: SimServer) -> dict[str, Any]:
    """Families by name, from a real scrape parsed by prometheus_client's own parser."""
    async with session.get(server.url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    family_name = sample_name.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    for sample in families[family_name].samples:
        if sample.name == sample_name and sample.labels == {**LABELS, **labels}:
            return float(sample.value)
    raise KeyError(sample_name)


async def test_metric_names_types_and_buckets_are_vllms(
    sim: SimServer, session: aiohttp.ClientSession
) -> None:
    families = await scrape(session, sim)
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_time_per_output_token_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
    }
    assert {name: families[name].type for name in expected} == expected

    def bounds(name: str) -> list[float]:
        return [float(s.labels["le"]) for s in families[name].samples if s.name.endswith("_bucket")]

    assert bounds("vllm:time_to_first_token_seconds") == [*TTFT_BUCKETS, float("inf")]
    assert bounds("vllm:inter_token_latency_seconds") == [*ITL_BUCKETS, float("inf")]
    assert bounds("vllm:e2e_request_latency_seconds") == [*REQUEST_LATENCY_BUCKETS, float("inf")]
    assert TTFT_BUCKETS[:3] == (0.001, 0.005, 0.01) and TTFT_BUCKETS[-1] == 2560.0
    assert ITL_BUCKETS[0] == 0.01 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0


async def test_counters_match_the_traffic_sent(sim: SimServer, session: aiohttp.ClientSession) -> None:
    prompts = [tokenizer.prompt_of_length(n) for n in (10, 20, 30)]
    for index, prompt in enumerate(prompts):
        await stream(
            session, sim.url + "/v1/completions", completion_body(prompt=prompt, max_tokens=5 + index)
        )
    body = {"model": "sim-tiny", "prompt": prompts[0], "max_tokens": 4, "sim": {"script": {"ttft": 0.01}}}
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
    families = await scrape(session, sim)
    assert value(families, "vllm:prompt_tokens_total") == 10 + 20 + 30 + 10
    assert value(families, "vllm:generation_tokens_total") == 5 + 6 + 7 + 4
    assert value(families, "vllm:request_success_total", finished_reason="length") == 4
    assert value(families, "vllm:request_success_total", finished_reason="stop") == 0
    assert value(families, "vllm:time_to_first_token_seconds_count") == 4
    assert value(families, "vllm:e2e_request_latency_seconds_count") == 4
    assert value(families, "vllm:inter_token_latency_seconds_count") == 4 + 5 + 6 + 3
    # One per request; its sum is each request's decode span over its gaps, so at most the ITL sum.
    assert value(families, "vllm:request_time_per_output_token_seconds_count") == 4
    tpot_sum = value(families, "vllm:request_time_per_output_token_seconds_sum")
    assert 0 < tpot_sum <= value(families, "vllm:inter_token_latency_seconds_sum") + 1e-9
    assert value(families, "vllm:num_requests_running") == 0


async def test_queue_and_kv_gauges_move_under_concurrent_load(
    start_sim: StartSim, session: aiohttp.ClientSession
) -> None:
    server = await start_sim(max_num_seqs=4, num_kv_blocks=256)
    body = {"model": "sim-tiny", "prompt": tokenizer.prompt_of_length(300), "max_tokens": 60}
    load = [asyncio.ensure_future(session.post(server.url + "/v1/completions", json=body)) for _ in range(12)]
    peak = {"running": 0.0, "waiting": 0.0, "kv": 0.0}
    for _ in range(40):
        families = await scrape(session, server)
        peak["running"] = max(peak["running"], value(families, "vllm:num_requests_running"))
        peak["waiting"] = max(peak["waiting"], value(families, "vllm:num_requests_waiting"))
        peak["kv"] = max(peak["kv"], value(families, "vllm:kv_cache_usage_perc"))
        if all(peak.values()):
            break
        await asyncio.sleep(0.01)
    for response in await asyncio.gather(*load):
        assert response.status == 200
        response.release()
    assert peak["running"] == 4  # capped by max_num_seqs
    assert peak["waiting"] >= 1
    assert 0.0 < peak["kv"] <= 1.0
    families = await scrape(session, server)
    assert (
        value(families, "vllm:num_requests_running") == 0 and value(families, "vllm:kv_cache_usage_perc") == 0
    )
    assert value(families, "vllm:request_queue_time_seconds_count") == 12
