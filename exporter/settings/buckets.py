"""Histogram bucket bounds of the probe histograms: defaults with the reason for each, an OpenTelemetry
preset, overridable.

``histogram_quantile`` interpolates linearly inside a bucket, so its answer is only as good as the
buckets around the quantile asked for. Bounds are therefore dense where decisions are made (the decode
deadline tiers, the target fluidity) and sparse where only the order of magnitude matters. Every
bound sequence is strictly increasing and finite; ``+Inf`` is added at exposition.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Final

# TTFT: 10 ms (a warm engine answering a short prompt on loopback) to 60 s (a queue behind long
# prefills), roughly log-spaced at 1-1.5-2-3-5-7.5 steps so the relative error of an interpolated
# quantile stays near 20% everywhere; 0.5 s and 1 s are common prefill deadlines, kept exact.
TTFT_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0,
)  # fmt: skip

# TBT: 1 ms to 5 s, dense between 5 and 200 ms where decode gaps and the deadline tiers live; the
# tiers' own deadlines (strict 25 ms, medium 50 ms, relaxed 100 ms) are bounds, so "share of gaps within
# the tier's deadline" is exact in PromQL. 0 s gaps (tokens after the first of a chunk) fall in the
# first bucket. Above 200 ms only stalls remain, and their size matters only roughly.
TBT_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025,
    0.03, 0.035, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15, 0.2,
    0.3, 0.5, 1.0, 2.0, 5.0,
)  # fmt: skip

# TPOT averages a request's gaps, so it sits in the same 5-200 ms band as TBT but never has 0 s or
# multi-second values unless the whole stream stalled: 2 ms to 1 s, the tiers' deadlines exact.
TPOT_BUCKETS: Final = (
    0.002, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04,
    0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0,
)  # fmt: skip

# E2E: 100 ms (a few tokens) to 10 min (thousands of tokens behind a long queue), log-spaced.
E2E_BUCKETS: Final = (
    0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0,
    20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
)  # fmt: skip

# Normalized latency (E2E / tokens) is TPOT plus TTFT spread over the tokens: TPOT's band, with a tail
# up to 10 s for very short answers behind a long TTFT.
NORMALIZED_LATENCY_BUCKETS: Final = (
    0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# Fluidity-index, 0-1: healthy services sit above 0.9, so the bounds are dense in 0.8-1.0 (the target
# fluidity 0.9 is a bound), coarse below where only "badly broken" matters. 0.999 separates the
# "perfect" requests (exactly 1.0, the last bucket) from the nearly perfect. A bound counts the values
# at or below it: the share of requests strictly above 0.9 is 1 - bucket{le="0.9"} / count.
FLUIDITY_BUCKETS: Final = (
    0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85,
    0.875, 0.9, 0.925, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0,
)  # fmt: skip

# The exporter's event-loop lag, sampled periodically: probe timings become unreliable above 3 ms
# (streams.saturation.LAG_LIMIT_S), so the bounds are fine around it and coarse into seconds.
LOOP_LAG_BUCKETS: Final = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


# OpenTelemetry's GenAI semantic conventions advise ExplicitBucketBoundaries per metric
# (docs/gen-ai/gen-ai-metrics.md of open-telemetry/semantic-conventions up to v1.41, since moved unchanged
# to open-telemetry/semantic-conventions-genai). Doubling from 10 ms to 81.92 s is their advice for
# gen_ai.client.operation.duration, .time_to_first_chunk, .time_per_output_chunk and
# gen_ai.server.request.duration: coarse around the decode deadlines (25/50/100 ms are not bounds), but
# identical bounds are what lets a team's OTel-instrumented clients and these probes be read together.
OTEL_GENAI_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip

# Their advice for gen_ai.server.time_per_output_token, the same (E2E - TTFT) / (tokens - 1) per request
# as our TPOT (OTel has no client-side TPOT).
OTEL_GENAI_TPOT_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip


@dataclass(frozen=True)
class HistogramBuckets:
    """Upper bounds of each probe histogram (``+Inf`` implied); the config may override any of them."""

    ttft: tuple[float, ...] = TTFT_BUCKETS
    tbt: tuple[float, ...] = TBT_BUCKETS
    tpot: tuple[float, ...] = TPOT_BUCKETS
    e2e: tuple[float, ...] = E2E_BUCKETS
    normalized_latency: tuple[float, ...] = NORMALIZED_LATENCY_BUCKETS
    fluidity: tuple[float, ...] = FLUIDITY_BUCKETS

    def __post_init__(self) -> None:
        for field in fields(self):
            object.__setattr__(self, field.name, checked_bounds(field.name, getattr(self, field.name)))


def checked_bounds(name: str, bounds: Sequence[float]) -> tuple[float, ...]:
    """``bounds`` as a tuple of floats; raises naming ``name`` unless non-empty, finite and increasing."""
    values = tuple(float(b) for b in bounds)
    if not values:
        raise ValueError(f"buckets.{name}: needs at least one bound")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"buckets.{name}: bounds must be finite (+Inf is added automatically)")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"buckets.{name}: bounds must be strictly increasing, got {list(values)}")
    return values


DEFAULT_BUCKETS: Final = HistogramBuckets()

# The probe histograms on OpenTelemetry's advice where it has a counterpart (docs/opentelemetry.md):
# TTFT as time_to_first_chunk, TBT as time_per_output_chunk, TPOT as server.time_per_output_token, E2E as
# client.operation.duration. Normalized latency and fluidity have none and keep ours.
OPENTELEMETRY_BUCKETS: Final = HistogramBuckets(
    ttft=OTEL_GENAI_DURATION_BUCKETS,
    tbt=OTEL_GENAI_DURATION_BUCKETS,
    tpot=OTEL_GENAI_TPOT_BUCKETS,
    e2e=OTEL_GENAI_DURATION_BUCKETS,
)

BUCKET_PRESETS: Final[Mapping[str, HistogramBuckets]] = {
    "default": DEFAULT_BUCKETS,
    "opentelemetry": OPENTELEMETRY_BUCKETS,
}
"""Named starting points for ``global.buckets.preset``; per-histogram overrides apply on top."""
BUCKET_PRESET_NAMES: Final = tuple(sorted(BUCKET_PRESETS))
