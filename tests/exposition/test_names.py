"""Tests of the metric name table: Prometheus naming conventions, one definition per name."""

from __future__ import annotations

import re

import pytest

from exporter.exposition import names
from exporter.exposition.names import MetricSpec

NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
RESERVED_LABELS = {
    "job",
    "instance",
    "le",
    "quantile",
}  # set by Prometheus, or reserved for histogram/summary


def test_names_are_unique() -> None:
    assert len({spec.name for spec in names.ALL}) == len(names.ALL)


@pytest.mark.parametrize("spec", names.ALL, ids=lambda spec: spec.name)
def test_spec_follows_conventions(spec: MetricSpec) -> None:
    assert NAME.match(spec.name)
    assert spec.name.startswith(names.NAMESPACE + "_")
    assert spec.name.endswith("_total") == (spec.type == "counter")
    assert not set(spec.labels) & RESERVED_LABELS
    assert len(set(spec.labels)) == len(spec.labels)
    assert spec.help and not spec.help.endswith(" ")
    if spec.type == "histogram":
        assert spec.name.endswith(("_seconds", "_index"))


def test_probe_values_say_what_they_count_on_both_endpoints() -> None:
    # The same HELP text goes out on /metrics (scheduled probes) and /probe (the one probe just run),
    # so it must be true of both: "cached from scheduled probes" was false on /probe.
    for spec in (
        *names.PROBE_HISTOGRAMS,
        names.PROBE_FLUIDITY,
        names.PROBE_REQUESTS,
        names.PROBE_LAST_SUCCESS,
    ):
        assert "not measured at scrape time" in spec.help and "on /probe: this probe alone" in spec.help
        assert "cached from scheduled probes" not in spec.help.lower()


def test_window_gauges_say_they_are_windows() -> None:
    windowed = [
        spec
        for spec in names.COLLECTED
        if spec.name.startswith(("fluidity_window_", "fluidity_engine_window_", "fluidity_gateway_window_"))
    ]
    assert windowed
    for spec in windowed:
        assert spec.type == "gauge" and names.WINDOW in spec.labels
