"""The metric families of one scrape: an empty family per spec, filled by label values and yielded in
``names.ALL`` order (what the probe collector, the ``/probe`` registry and the jobs collector build)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from exporter.exposition import names
from exporter.exposition.names import MetricSpec
from exporter.exposition.views import HistogramCounts


def new_family(spec: MetricSpec) -> Metric:
    """An empty family of ``spec`` 's type, name, HELP and labels."""
    labels = list(spec.labels)
    if spec.type == "histogram":
        return HistogramMetricFamily(spec.name, spec.help, labels=labels)
    if spec.type == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=labels)


class Families:
    """The families of one scrape, created on first use, yielded in ``names.ALL`` order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(self, spec: MetricSpec, labels: Sequence[str], value: float) -> None:
        family = self._get(spec)
        family.add_metric(list(labels), value)  # type: ignore[attr-defined]

    def histogram(self, spec: MetricSpec, labels: Sequence[str], counts: HistogramCounts) -> None:
        family = self._get(spec)
        assert isinstance(family, HistogramMetricFamily)
        buckets = [(go_float(bound), float(count)) for bound, count in counts.buckets]
        family.add_metric(list(labels), buckets, counts.sum)

    def _get(self, spec: MetricSpec) -> Metric:
        family = self._by_name.get(spec.name)
        if family is None:
            family = self._by_name[spec.name] = new_family(spec)
        return family

    def __iter__(self) -> Iterator[Metric]:
        order = {spec.name: index for index, spec in enumerate(names.ALL)}
        return iter(sorted(self._by_name.values(), key=lambda f: order[_spec_name(f)]))


def _spec_name(family: Metric) -> str:
    # CounterMetricFamily drops "_total" from its name; the specs keep it.
    return family.name + "_total" if family.type == "counter" else family.name


def go_float(value: float) -> str:
    """A float as Prometheus writes it in a label (``+Inf``, ``0.5``), via prometheus_client."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]
