"""Tailing the inference engine's own ``/metrics`` (vLLM, SGLang, TGI, llama.cpp server) and a gateway's
(llm-d's endpoint picker, from the Kubernetes Gateway API inference extension).

The flow is one-way. ``families`` knows each engine's metric names and maps them to canonical
``Signal`` s; ``snapshot`` parses one scraped page into an ``EngineSnapshot`` (pure); ``scrape`` fetches
the page (network I/O only, failures as results); ``window`` keeps recent snapshots with bounded
memory; ``derive`` turns a window into rates, histogram deltas and quantiles (pure).

Typical use by the daemon::

    window = SnapshotWindow(max_age_s=3600, max_items=241)
    result = await scrape(session, Page("http://engine:8000/metrics"), timeout=5.0)
    if result.snapshot is not None:
        window.add(result.snapshot)
    figures = window.figures(300)
    p99 = figures.quantile(Signal.SERVER_TTFT_SECONDS, 0.99) if figures else None
    # p99.measured is None where the buckets give only a bound (p99.resolution, p99.bound)
"""

from exporter.engine.catalogue import (
    AUTO,
    ENGINE_CATALOGUE,
    ENGINES,
    GATEWAY_CATALOGUE,
    GATEWAYS,
    VALID_GATEWAY_KINDS,
    VALID_KINDS,
    Catalogue,
    EngineFamilies,
    Signal,
    SignalType,
    UnknownEngineError,
    detect_kind,
    families_for,
)
from exporter.engine.derive import (
    DEFAULT_QUANTILES,
    BucketQuantile,
    Resolution,
    WindowFigures,
    bucket_quantile,
    client_minus_server_mean_ttft,
    client_minus_server_ttft,
    derive,
    histogram_quantile,
)
from exporter.engine.scrape import Page, ScrapeFailure, ScrapeResult, scrape
from exporter.engine.snapshot import EngineSnapshot, ExpositionError, HistogramData, parse_exposition
from exporter.engine.snapshot_window import SnapshotWindow

__all__ = [
    "AUTO",
    "DEFAULT_QUANTILES",
    "ENGINES",
    "ENGINE_CATALOGUE",
    "GATEWAYS",
    "GATEWAY_CATALOGUE",
    "VALID_GATEWAY_KINDS",
    "VALID_KINDS",
    "BucketQuantile",
    "Catalogue",
    "EngineFamilies",
    "EngineSnapshot",
    "ExpositionError",
    "HistogramData",
    "Page",
    "Resolution",
    "ScrapeFailure",
    "ScrapeResult",
    "Signal",
    "SignalType",
    "SnapshotWindow",
    "UnknownEngineError",
    "WindowFigures",
    "bucket_quantile",
    "client_minus_server_mean_ttft",
    "client_minus_server_ttft",
    "derive",
    "detect_kind",
    "families_for",
    "histogram_quantile",
    "parse_exposition",
    "scrape",
]
