"""Tests of the bucket presets: the OpenTelemetry GenAI advice, taken over exactly, and how a config
chooses a preset and overrides single histograms on top of it."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry

from exporter.daemon.config_facts import histogram_buckets
from exporter.evaluation import EvaluationSpec
from exporter.exposition.collector import FluidityCollector
from exporter.exposition.result_store import ResultStore
from exporter.settings import parse_config
from exporter.settings.buckets import (
    BUCKET_PRESET_NAMES,
    BUCKET_PRESETS,
    DEFAULT_BUCKETS,
    OPENTELEMETRY_BUCKETS,
)
from tests.exposition.builders import POLICY, mixed_run

# The ExplicitBucketBoundaries the GenAI semantic conventions give (docs/gen-ai/gen-ai-metrics.md),
# written out here by hand so that a slip in the preset shows as a difference.
CLIENT_DURATION = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
SERVER_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
T = "targets:\n  - name: a\n    url: http://h:8000\n"


def test_opentelemetry_preset_is_the_semantic_conventions_advice() -> None:
    assert list(OPENTELEMETRY_BUCKETS.ttft) == CLIENT_DURATION  # time_to_first_chunk
    assert list(OPENTELEMETRY_BUCKETS.tbt) == CLIENT_DURATION  # time_per_output_chunk
    assert list(OPENTELEMETRY_BUCKETS.e2e) == CLIENT_DURATION  # client.operation.duration
    assert list(OPENTELEMETRY_BUCKETS.tpot) == SERVER_TPOT  # server.time_per_output_token
    # No OpenTelemetry counterpart: ours stay.
    assert OPENTELEMETRY_BUCKETS.normalized_latency == DEFAULT_BUCKETS.normalized_latency
    assert OPENTELEMETRY_BUCKETS.fluidity == DEFAULT_BUCKETS.fluidity
    assert BUCKET_PRESET_NAMES == ("default", "opentelemetry")
    assert BUCKET_PRESETS["default"] is DEFAULT_BUCKETS


def test_a_config_picks_the_preset_and_overrides_one_histogram() -> None:
    config = parse_config(
        T + "global:\n  buckets: {preset: opentelemetry, tbt: [0.025, 0.05, 0.1]}\n", environ={}
    )
    assert config.global_.buckets.preset == "opentelemetry"
    chosen = histogram_buckets(config)
    assert chosen.ttft == OPENTELEMETRY_BUCKETS.ttft and chosen.tpot == OPENTELEMETRY_BUCKETS.tpot
    assert chosen.tbt == (0.025, 0.05, 0.1)
    assert histogram_buckets(parse_config(T, environ={})) == DEFAULT_BUCKETS


def test_the_exposed_ttft_histogram_has_the_opentelemetry_bounds() -> None:
    store = ResultStore(buckets=OPENTELEMETRY_BUCKETS, clock=lambda: 100.0)
    store.add("a", "m", mixed_run(), EvaluationSpec(POLICY), 90.0)
    registry = CollectorRegistry()
    registry.register(FluidityCollector(store, {"5m": 300.0}, clock=lambda: 100.0))
    family = next(f for f in registry.collect() if f.name == "fluidity_probe_ttft_seconds")
    bounds = [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]
    assert bounds == [*CLIENT_DURATION, math.inf]
