"""docs/deployment.md's ServiceMonitor endpoint for ``/probe`` keeps that answer's own gauges and drops
every family the rules and dashboards read from ``/metrics``: a ``/probe`` answer counts over one probe,
so its counters restart at every scrape and would mix with the cumulative ones."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from exporter.exposition import names

DEPLOYMENT_DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}


def keep_regex() -> str:
    [block] = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", DEPLOYMENT_DOC.read_text(), re.DOTALL)
        if "path: /probe" in b
    ]
    [endpoint] = yaml.safe_load(block)
    [step] = endpoint["metricRelabelings"]
    assert step["sourceLabels"] == ["__name__"] and step["action"] == "keep"
    return str(step["regex"])


def sample_names(spec: names.MetricSpec) -> list[str]:
    """The names a family's samples carry in the text exposition."""
    if spec.type == "gauge":
        return [spec.name]
    base = spec.name.removesuffix("_total")
    return [base + suffix for suffix in SUFFIXES[spec.type]]


def test_the_probe_endpoint_keeps_its_gauges_and_drops_what_metrics_counts() -> None:
    regex = keep_regex()
    for spec in (*names.COLLECTED, *names.PROBE_ONLY):
        wanted = spec in names.PROBE_ONLY or spec.name.startswith("fluidity_window_")
        for name in sample_names(spec):
            # Prometheus anchors a relabel regex at both ends.
            assert bool(re.fullmatch(regex, name)) == wanted, name
