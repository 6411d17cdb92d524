"""The prometheus-client side of the exporter: metric names, the result store, collectors.

``names`` holds every metric and label name (the histogram bounds are options, in
``exporter.settings.buckets``); ``store`` the ``ResultStore`` where probe runs and engine scrapes land
(``store_limits`` its bounds, ``run_rows`` a run's window rows), and ``views`` the snapshots of it that
readers get (and the histograms behind them); ``window`` the per-request rows and the figures a rolling
window shows; ``collector`` the scrape-time ``FluidityCollector``, ``families`` the metric families a
scrape fills, ``probe_registry`` the ``/probe`` answer; ``jobs`` the ``JobsCollector`` of job results
(capacity searches, prefill profiles); ``self_metrics`` the exporter's own health; ``render`` the text
format.
"""

from exporter.exposition.collector import FluidityCollector
from exporter.exposition.job_gauges import JobsCollector, JobsSnapshot
from exporter.exposition.probe_registry import probe_registry
from exporter.exposition.result_store import ResultStore
from exporter.exposition.self_metrics import SelfMetrics
from exporter.exposition.store_limits import StoreLimits
from exporter.exposition.views import RecentResult
from exporter.exposition.window import ProbeWindow

__all__ = [
    "FluidityCollector",
    "JobsCollector",
    "JobsSnapshot",
    "ProbeWindow",
    "RecentResult",
    "ResultStore",
    "SelfMetrics",
    "StoreLimits",
    "probe_registry",
]
