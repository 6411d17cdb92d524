"""vLLM-named Prometheus metrics of the simulator, collected on scrape from a snapshot.

Names, types and bucket boundaries are vLLM's own (``vllm/v1/metrics/loggers.py``), with vLLM's
``model_name`` and ``engine`` labels, so that code and dashboards that scrape vLLM can be built and tested
against the simulator. The engine and streams update plain counters in ``SimStats``; ``SimCollector``
builds fresh metric families from them on every scrape and nothing mutates global state, so each server
instance has its own ``CollectorRegistry``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# vLLM's buckets, verbatim: TTFT spans 1 ms to ~43 min, inter-token latency 10 ms to 80 s, and request
# latencies 0.3 s to ~2 h.
TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0)
TTFT_BUCKETS += (2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
ITL_BUCKETS += (5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0)
REQUEST_LATENCY_BUCKETS += (40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length", "abort")
_RUNNING_DOC = "Number of requests in model execution batches."
_QUEUE_DOC = "Histogram of time spent in WAITING phase for request."


@dataclass
class Histogram:
    """Bucket counts and a sum; cumulative only when exposed."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose upper bound is >= it (Prometheus' ``le``)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


@dataclass
class SimStats:
    """Everything the metrics expose, as plain numbers the server updates."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    # One observation per finished request, on the ITL buckets, as vLLM's
    # request_time_per_output_token_seconds.
    request_tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))


@dataclass(frozen=True)
class EngineGauges:
    """A snapshot of the scheduler state at scrape time."""

    running: int
    waiting: int
    kv_usage: float
    preemptions: int
    cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    cache_hits: int = 0  # prompt tokens found there


class SimCollector(Collector):
    """Builds vLLM's metric families from ``stats`` and a gauge snapshot on each scrape."""

    def __init__(self, model: str, stats: SimStats, gauges: Callable[[], EngineGauges]) -> None:
        self.labels = [model, "0"]
        self.stats = stats
        self.gauges = gauges

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        family.add_metric(self.labels, value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["model_name", "engine"])
        family.add_metric(self.labels, value)
        return family

    def _histogram(self, name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=["model_name", "engine"])
        family.add_metric(self.labels, hist.cumulative(), hist.total)
        return family

    def _success(self) -> CounterMetricFamily:
        family = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "engine", "finished_reason"],
        )
        for reason, count in self.stats.success.items():
            family.add_metric([*self.labels, reason], count)
        return family

    def collect(self) -> Iterator[Metric]:
        """Fresh families from the current snapshot."""
        snap, stats = self.gauges(), self.stats
        yield self._gauge("vllm:num_requests_running", _RUNNING_DOC, snap.running)
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", snap.waiting
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", snap.kv_usage
        )
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", snap.preemptions
        )
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            snap.cache_queries,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            snap.cache_hits,
        )
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens)
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", stats.generation_tokens
        )
        yield self._success()
        yield self._histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", stats.ttft
        )
        yield self._histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", stats.itl
        )
        yield self._histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", stats.e2e
        )
        yield self._histogram("vllm:request_queue_time_seconds", _QUEUE_DOC, stats.queue)
        yield self._histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            stats.request_tpot,
        )


def make_registry(model: str, stats: SimStats, gauges: Callable[[], EngineGauges]) -> CollectorRegistry:
    """A registry of its own per server instance, holding only the simulator's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimCollector(model, stats, gauges))
    return registry
