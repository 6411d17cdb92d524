"""Probe results with known stamps, engine snapshots and scrape results for the exposition tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

from exporter.engine.catalogue import Signal
from exporter.engine.scrape import ScrapeFailure, ScrapeResult
from exporter.engine.snapshot import EngineSnapshot, HistogramData
from exporter.evaluation import DeadlinePolicy
from exporter.streams.result import Outcome, ProbeResult

POLICY = DeadlinePolicy(prefill_deadline=0.5)


def streamed(
    ttft: float, gaps: Sequence[float], *, counts: Sequence[int] | None = None, late: float = 0.002
) -> ProbeResult:
    """A completed request written at t=10 s: first event after ``ttft``, then one event per gap."""
    sent = 10.0
    times = [sent + ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return ProbeResult(
        api="chat",
        scheduled_at=sent - late,
        sent_at=sent,
        send_overhead_s=late,
        token_times=times,
        token_counts=list(counts) if counts is not None else [1] * len(times),
        finished_at=times[-1] + 0.001,
    )


def failed(outcome: Outcome = Outcome.HTTP_STATUS) -> ProbeResult:
    """A request that got no token."""
    return ProbeResult(
        api="chat",
        outcome=outcome,
        http_status=503 if outcome is Outcome.HTTP_STATUS else None,
        sent_at=10.0,
        finished_at=10.1,
        error="boom",
    )


def smooth(n: int = 40, gap: float = 0.02, ttft: float = 0.2) -> ProbeResult:
    return streamed(ttft, [gap] * (n - 1))


def stalled(n: int = 40, stall: float = 1.0) -> ProbeResult:
    """Steady 30 ms gaps with one stall in the middle: misses strict and medium deadlines."""
    half = (n - 1) // 2
    return streamed(0.3, [0.03] * half + [stall] + [0.03] * (n - 2 - half))


def mixed_run() -> list[ProbeResult]:
    """Two smooth requests (the second resent once on a fresh connection), one stalled, one with
    multi-token chunks whose timings its client flagged unreliable, one one-token, two failures."""
    resent = smooth(60, 0.045, 0.35)
    resent.retries = 1
    chunky = streamed(0.25, [0.06, 0.0, 0.07] * 5, counts=[1] + [2, 1, 3] * 5)
    chunky.unreliable = True
    return [
        smooth(),
        resent,
        stalled(),
        chunky,
        streamed(0.4, []),
        failed(),
        failed(Outcome.STREAM_ABORTED),
    ]


def histogram(bounds: Sequence[float], counts: Sequence[float], total_sum: float) -> HistogramData:
    """Cumulative counts per finite bound; the +Inf bucket is the last count."""
    buckets = (*zip(bounds, counts, strict=True), (math.inf, counts[-1]))
    return HistogramData(tuple(buckets), total_sum, counts[-1])


def engine_snapshot(at: float, scale: float) -> EngineSnapshot:
    """A vLLM-like snapshot whose counters and histograms grow with ``scale``."""
    bounds = (0.05, 0.1, 0.5, 1.0)
    return EngineSnapshot(
        kind="vllm",
        at=at,
        values={
            Signal.QUEUE_DEPTH: 3.0 * scale,
            Signal.RUNNING_REQUESTS: 5.0,
            Signal.KV_CACHE_USAGE: 0.25,
            Signal.PREEMPTIONS_TOTAL: 7.0 * scale,
            Signal.PROMPT_TOKENS_TOTAL: 1000.0 * scale,
            Signal.GENERATION_TOKENS_TOTAL: 2000.0 * scale,
            Signal.REQUEST_SUCCESS_TOTAL: 10.0 * scale,
        },
        histograms={
            Signal.SERVER_TTFT_SECONDS: histogram(
                bounds, [2 * scale, 6 * scale, 9 * scale, 10 * scale], 2.0 * scale
            ),
            Signal.SERVER_ITL_SECONDS: histogram(
                bounds, [90 * scale, 99 * scale, 100 * scale, 100 * scale], 2.5 * scale
            ),
        },
    )


def scraped(snapshot: EngineSnapshot, duration_s: float = 0.05) -> ScrapeResult:
    return ScrapeResult(snapshot, None, "", duration_s)


def scrape_failed(reason: ScrapeFailure = ScrapeFailure.CONNECT_ERROR) -> ScrapeResult:
    return ScrapeResult(None, reason, "connection refused", 0.01)
