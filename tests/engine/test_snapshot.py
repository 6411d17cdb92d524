"""Tests of exporter.engine.snapshot: real-looking pages of each engine read into canonical signals."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.engine.catalogue import (
    GATEWAY_CATALOGUE,
    EngineFamilies,
    Signal,
    Source,
    Unit,
    UnknownEngineError,
)
from exporter.engine.snapshot import EngineSnapshot, ExpositionError, HistogramData, parse_exposition
from tests.engine import fixtures

INF = math.inf


def test_vllm_v1_sums_label_sets_and_prefers_new_names() -> None:
    snap = parse_exposition(fixtures.VLLM_V1, at=12.5)
    assert (snap.kind, snap.at) == ("vllm", 12.5)
    assert snap.values == {
        Signal.RUNNING_REQUESTS: 5.0,
        Signal.QUEUE_DEPTH: 5.0,
        Signal.KV_CACHE_USAGE: 0.375,  # the mean of two engine cores, not the deprecated gauge's 0.99
        Signal.PREEMPTIONS_TOTAL: 7.0,
        Signal.PROMPT_TOKENS_TOTAL: 1500.0,
        Signal.GENERATION_TOKENS_TOTAL: 2000.0,
        Signal.REQUEST_SUCCESS_TOTAL: 10.0,  # summed over finished_reason
    }
    assert snap.histograms[Signal.SERVER_TTFT_SECONDS] == HistogramData(
        ((0.1, 2.0), (0.5, 7.0), (INF, 10.0)), 4.0, 10.0
    )
    assert snap.histograms[Signal.SERVER_ITL_SECONDS].buckets == ((0.01, 10.0), (0.025, 90.0), (INF, 100.0))
    assert snap.histograms[Signal.SERVER_E2E_SECONDS] == HistogramData(((1.0, 5.0), (INF, 10.0)), 12.0, 10.0)
    assert snap.histograms[Signal.SERVER_QUEUE_SECONDS].count == 10.0
    assert snap.sources[Signal.KV_CACHE_USAGE] == "vllm:kv_cache_usage_perc"
    assert snap.sources[Signal.SERVER_ITL_SECONDS] == "vllm:inter_token_latency_seconds"


def test_vllm_v0_old_names_are_read_and_created_samples_ignored() -> None:
    snap = parse_exposition(fixtures.VLLM_V0, at=0.0)
    assert snap.kind == "vllm"
    assert snap.value(Signal.KV_CACHE_USAGE) == 0.875
    assert snap.sources[Signal.KV_CACHE_USAGE] == "vllm:gpu_cache_usage_perc"
    assert snap.value(Signal.PROMPT_TOKENS_TOTAL) == 42.0  # not 42 + the _created timestamp
    assert snap.value(Signal.QUEUE_DEPTH) == 6.0
    assert snap.sources[Signal.SERVER_ITL_SECONDS] == "vllm:time_per_output_token_seconds"
    assert snap.histograms[Signal.SERVER_ITL_SECONDS].buckets == ((0.01, 0.0), (0.025, 4.0), (INF, 4.0))
    assert snap.value(Signal.PREEMPTIONS_TOTAL) is None
    assert Signal.SERVER_TTFT_SECONDS not in snap.histograms


def test_sglang_current_names() -> None:
    snap = parse_exposition(fixtures.SGLANG, at=0.0)
    assert snap.kind == "sglang"
    assert snap.values == {
        Signal.RUNNING_REQUESTS: 162.0,
        Signal.QUEUE_DEPTH: 28.0,
        Signal.KV_CACHE_USAGE: 0.28,
        Signal.PREEMPTIONS_TOTAL: 3.0,
        Signal.PROMPT_TOKENS_TOTAL: 8128902.0,
        Signal.GENERATION_TOKENS_TOTAL: 7557572.0,
        Signal.REQUEST_SUCCESS_TOTAL: 11008.0,
    }
    assert snap.histograms[Signal.SERVER_TTFT_SECONDS] == HistogramData(
        ((0.1, 10.0), (0.2, 30.0), (INF, 40.0)), 20.0, 40.0
    )
    assert snap.histograms[Signal.SERVER_QUEUE_SECONDS].buckets == ((0.0, 5.0), (0.1, 15.0), (INF, 20.0))
    assert snap.sources[Signal.SERVER_ITL_SECONDS] == "sglang:inter_token_latency_seconds"


def test_vllm_0_13_without_the_removed_names_reads_every_signal() -> None:
    snap = parse_exposition(fixtures.VLLM_0_13, at=0.0)
    assert snap.kind == "vllm"
    assert snap.values == {
        Signal.RUNNING_REQUESTS: 6.0,
        Signal.QUEUE_DEPTH: 2.0,
        Signal.KV_CACHE_USAGE: 0.4,
        Signal.PREEMPTIONS_TOTAL: 1.0,
        Signal.PROMPT_TOKENS_TOTAL: 4096.0,
        Signal.GENERATION_TOKENS_TOTAL: 1024.0,
        Signal.REQUEST_SUCCESS_TOTAL: 4.0,
    }
    assert snap.sources[Signal.KV_CACHE_USAGE] == "vllm:kv_cache_usage_perc"
    assert snap.sources[Signal.SERVER_ITL_SECONDS] == "vllm:inter_token_latency_seconds"
    assert snap.histograms[Signal.SERVER_ITL_SECONDS].count == 1020.0
    # Per-request TPOT stays apart from per-token ITL: 4 requests, not 1020 gaps.
    assert snap.histograms[Signal.SERVER_TPOT_SECONDS] == HistogramData(
        ((0.01, 1.0), (0.025, 4.0), (INF, 4.0)), 0.06, 4.0
    )
    assert set(snap.histograms) == {
        Signal.SERVER_TTFT_SECONDS,
        Signal.SERVER_ITL_SECONDS,
        Signal.SERVER_TPOT_SECONDS,
        Signal.SERVER_E2E_SECONDS,
        Signal.SERVER_QUEUE_SECONDS,
    }


def test_sglang_behind_its_router_underscore_names() -> None:
    snap = parse_exposition(fixtures.SGLANG_ROUTER, at=0.0)
    assert snap.kind == "sglang"
    assert snap.values == {
        Signal.RUNNING_REQUESTS: 12.0,
        Signal.QUEUE_DEPTH: 5.0,
        Signal.KV_CACHE_USAGE: 0.5,
        Signal.REQUEST_SUCCESS_TOTAL: 300.0,
        Signal.GENERATION_TOKENS_TOTAL: 9000.0,
    }
    assert snap.sources[Signal.SERVER_TTFT_SECONDS] == "sglang_time_to_first_token_seconds"
    assert snap.histograms[Signal.SERVER_TTFT_SECONDS] == HistogramData(
        ((0.1, 10.0), (0.2, 30.0), (INF, 30.0)), 6.0, 30.0
    )
    assert snap.sources[Signal.SERVER_ITL_SECONDS] == "sglang_inter_token_latency_seconds"


def test_sglang_colon_names_win_over_underscore_twins() -> None:
    both = fixtures.SGLANG + fixtures.SGLANG_ROUTER
    snap = parse_exposition(both, at=0.0)
    assert snap.value(Signal.RUNNING_REQUESTS) == 162.0
    assert snap.sources[Signal.RUNNING_REQUESTS] == "sglang:num_running_reqs"


def test_llm_d_epp_gateway_reads_streaming_ttft_and_new_names_first() -> None:
    snap = parse_exposition(fixtures.LLM_D_EPP, at=3.0, catalogue=GATEWAY_CATALOGUE)
    assert (snap.kind, snap.at) == ("llm-d-epp", 3.0)
    assert snap.values == {
        Signal.REQUESTS_TOTAL: 100.0,  # summed over fairness ids; not the deprecated twin's 999
        Signal.REQUEST_ERRORS_TOTAL: 3.0,
        Signal.RUNNING_REQUESTS: 7.0,
        Signal.SLO_VIOLATIONS_TOTAL: 6.0,  # ttft and tpot violations together
    }
    # streaming="false" observations (20 requests whose "TTFT" is their whole duration) are left out.
    assert snap.histograms[Signal.SERVER_TTFT_SECONDS] == HistogramData(
        ((0.1, 20.0), (0.2, 60.0), (INF, 80.0)), 12.0, 80.0
    )
    assert snap.histograms[Signal.SERVER_ITL_SECONDS].count == 8000.0
    assert snap.histograms[Signal.SERVER_TPOT_SECONDS].sum == 2.0
    assert snap.histograms[Signal.SERVER_E2E_SECONDS].buckets == ((5.0, 50.0), (10.0, 100.0), (INF, 100.0))
    assert snap.sources[Signal.REQUESTS_TOTAL] == "llm_d_epp_request_total"


def test_llm_d_epp_model_filter_and_deprecated_prefix() -> None:
    other = parse_exposition(fixtures.LLM_D_EPP, at=0.0, catalogue=GATEWAY_CATALOGUE, model="mistral")
    assert other.values == {} and other.histograms == {}
    old = parse_exposition(
        fixtures.INFERENCE_OBJECTIVE, at=0.0, kind="llm-d-epp", catalogue=GATEWAY_CATALOGUE
    )
    assert old.value(Signal.REQUESTS_TOTAL) == 40.0
    assert old.sources[Signal.SERVER_E2E_SECONDS] == "inference_objective_request_duration_seconds"


def test_a_gateway_page_read_as_an_engine_is_a_parse_error() -> None:
    with pytest.raises(ExpositionError, match="no known engine metrics"):
        parse_exposition(fixtures.LLM_D_EPP, at=0.0)


def test_sglang_old_itl_name() -> None:
    snap = parse_exposition(fixtures.SGLANG_OLD, at=0.0)
    assert snap.sources[Signal.SERVER_ITL_SECONDS] == "sglang:time_per_output_token_seconds"
    assert snap.histograms[Signal.SERVER_ITL_SECONDS].count == 11.0


def test_tgi_unsuffixed_counters_and_token_totals_from_histogram_sums() -> None:
    snap = parse_exposition(fixtures.TGI, at=0.0)
    assert snap.kind == "tgi"
    assert snap.values == {
        Signal.QUEUE_DEPTH: 3.0,
        Signal.RUNNING_REQUESTS: 8.0,
        Signal.PROMPT_TOKENS_TOTAL: 2500.0,
        Signal.GENERATION_TOKENS_TOTAL: 3000.0,
        Signal.REQUEST_SUCCESS_TOTAL: 10.0,  # tgi_request_success, not tgi_request_count
    }
    assert set(snap.histograms) == {
        Signal.SERVER_ITL_SECONDS,
        Signal.SERVER_E2E_SECONDS,
        Signal.SERVER_QUEUE_SECONDS,
    }
    assert snap.histograms[Signal.SERVER_E2E_SECONDS] == HistogramData(
        ((1.0, 2.0), (5.0, 8.0), (INF, 10.0)), 30.0, 10.0
    )


def test_llamacpp_gauges_and_counters_without_labels() -> None:
    snap = parse_exposition(fixtures.LLAMACPP, at=0.0)
    assert snap.kind == "llamacpp"
    assert snap.values == {
        Signal.QUEUE_DEPTH: 2.0,
        Signal.RUNNING_REQUESTS: 1.0,
        Signal.KV_CACHE_USAGE: 0.125,
        Signal.PROMPT_TOKENS_TOTAL: 6886.0,
        Signal.GENERATION_TOKENS_TOTAL: 3469.0,
    }
    assert snap.histograms == {}


def test_explicit_kind_reads_with_that_table() -> None:
    assert parse_exposition(fixtures.LLAMACPP, 0.0, kind="llamacpp").kind == "llamacpp"
    # vLLM's table finds nothing in a llama.cpp page: an empty snapshot, not an error.
    assert parse_exposition(fixtures.LLAMACPP, 0.0, kind="vllm") == EngineSnapshot("vllm", 0.0)
    with pytest.raises(UnknownEngineError, match='unknown engine kind "llama"'):
        parse_exposition(fixtures.LLAMACPP, 0.0, kind="llama")


TWO_MODELS = """\
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="a",engine="0"} 10
vllm:prompt_tokens_total{model_name="b",engine="0"} 20
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 1
vllm:num_requests_waiting{model_name="b"} 2
vllm:num_requests_waiting 4
"""


def test_model_filter_keeps_that_model_and_unlabelled_samples() -> None:
    assert parse_exposition(TWO_MODELS, 0.0).value(Signal.PROMPT_TOKENS_TOTAL) == 30.0
    only_a = parse_exposition(TWO_MODELS, 0.0, model="a")
    assert only_a.value(Signal.PROMPT_TOKENS_TOTAL) == 10.0
    assert only_a.value(Signal.QUEUE_DEPTH) == 5.0  # a's 1 plus the unlabelled 4
    missing = parse_exposition(TWO_MODELS, 0.0, model="c")
    assert missing.value(Signal.PROMPT_TOKENS_TOTAL) is None


def test_percent_is_converted_to_a_ratio() -> None:
    table = EngineFamilies(
        "pct-engine", "pct_", {Signal.KV_CACHE_USAGE: Source(("pct_kv_usage_percent",), Unit.PERCENT)}
    )
    text = "# TYPE pct_kv_usage_percent gauge\npct_kv_usage_percent 87.5\n"
    assert parse_exposition(text, 0.0, kind=table).value(Signal.KV_CACHE_USAGE) == pytest.approx(0.875)


def test_untyped_samples_and_repeated_blocks_are_read() -> None:
    text = "vllm:num_requests_waiting 2\nvllm:num_requests_waiting 3\nvllm:prompt_tokens_total 5\n"
    snap = parse_exposition(text, 0.0)
    assert snap.value(Signal.QUEUE_DEPTH) == 5.0
    assert snap.value(Signal.PROMPT_TOKENS_TOTAL) == 5.0


def test_nan_samples_are_skipped() -> None:
    text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting NaN\n"
    assert parse_exposition(text, 0.0).value(Signal.QUEUE_DEPTH) is None


def test_missing_inf_bucket_is_the_count() -> None:
    text = """\
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0"} 2
vllm:e2e_request_latency_seconds_count 3
vllm:e2e_request_latency_seconds_sum 4
"""
    histogram = parse_exposition(text, 0.0).histograms[Signal.SERVER_E2E_SECONDS]
    assert histogram == HistogramData(((1.0, 2.0), (INF, 3.0)), 4.0, 3.0)


H = "# TYPE vllm:e2e_request_latency_seconds histogram\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("garbage here\n", "malformed exposition text"),
        ("<html><body>Internal Server Error</body></html>", "malformed exposition text: invalid metric name"),
        ('vllm:num_requests_waiting{model_name="a" 1\n', "malformed exposition text"),
        ("", "no known engine metrics found"),
        (
            "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n",
            "no known engine metrics",
        ),
        (H + 'vllm:e2e_request_latency_seconds_bucket{le="fast"} 1\n', 'needs a numeric "le" label'),
        (H + "vllm:e2e_request_latency_seconds_bucket 1\n", 'needs a numeric "le" label'),
        (H + 'vllm:e2e_request_latency_seconds_bucket{le="1"} 1\n', "neither a +Inf bucket nor a _count"),
        (H + 'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} -1\n', "count must be finite and >= 0"),
        (H + 'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} NaN\n', "count must be finite and >= 0"),
    ],
)
def test_malformed_text_raises_exposition_error(text: str, message: str) -> None:
    with pytest.raises(ExpositionError, match=message.replace("+", r"\+").replace("(", r"\(")):
        parse_exposition(text, 0.0)


FRAGMENTS = [
    "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds",
    "tgi_request_duration",
    "_bucket",
    "_sum",
    "_count",
    "_total",
    "{",
    "}",
    "le=",
    "model_name=",
    '"',
    "+Inf",
    "0.5",
    "1",
    "-1",
    "NaN",
    " ",
    "\n",
    "# TYPE ",
    "# HELP ",
    "histogram",
    "counter",
    "gauge",
    "summary",
    ",",
    "\\",
    "=",
    "#",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join) | st.text(max_size=200))
def test_any_text_gives_a_snapshot_or_an_exposition_error(text: str) -> None:
    try:
        snap = parse_exposition(text, 0.0)
    except ExpositionError:
        return
    for histogram in snap.histograms.values():
        assert histogram.buckets[-1][0] == INF
        assert [b for b, _ in histogram.buckets] == sorted(b for b, _ in histogram.buckets)


def test_a_summary_where_a_histogram_is_expected_is_skipped() -> None:
    text = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 1
# TYPE tgi_request_duration summary
tgi_request_duration{quantile="0.5"} 0.7
tgi_request_duration_sum 30
tgi_request_duration_count 10
"""
    snap = parse_exposition(text, 0.0)
    assert snap.kind == "tgi"
    assert snap.histograms == {}
    assert snap.value(Signal.QUEUE_DEPTH) == 1.0


@pytest.mark.parametrize(
    ("text", "kind", "queries", "hits"),
    [
        (
            '# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine="0"} 900\n'
            '# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{engine="0"} 512\n',
            "vllm",
            900.0,
            512.0,
        ),
        (  # vLLM V1 before 0.10
            "# TYPE vllm:gpu_prefix_cache_queries counter\nvllm:gpu_prefix_cache_queries_total 70\n"
            "# TYPE vllm:gpu_prefix_cache_hits counter\nvllm:gpu_prefix_cache_hits_total 64\n",
            "vllm",
            70.0,
            64.0,
        ),
        (
            "# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total 2680\n",
            "llamacpp",
            None,
            2680.0,
        ),
    ],
)
def test_prefix_cache_counters_are_read(text: str, kind: str, queries: float | None, hits: float) -> None:
    snap = parse_exposition(text, at=0.0, kind=kind)
    assert snap.value(Signal.PREFIX_CACHE_QUERIES_TOTAL) == queries
    assert snap.value(Signal.PREFIX_CACHE_HITS_TOTAL) == hits
