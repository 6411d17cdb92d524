"""An engine's ``/metrics`` text read into canonical signals at one instant: a pure function.

``parse_exposition(text, at)`` parses Prometheus text format with ``prometheus_client``'s own parser,
chooses the engine's name table (``catalogue.py``), and sums every signal over the label sets that
belong to the chosen model (and carry a source's required labels, e.g. a gateway's
``streaming="true"``). Label sets are summed because engines split one fact across labels that
we do not need apart (vLLM's ``engine`` index under data parallelism, ``finished_reason`` on the
success counter); a 0-1 usage is averaged instead (``AVERAGED_SIGNALS``). A sample without a
``model_name`` label (TGI, llama.cpp) belongs to every model.

Histograms keep their cumulative buckets (upper bound -> count), sum and count, so that a window can
take deltas and interpolate quantiles the way Prometheus does (``derive.py``). Label sets are merged
bound by bound, which is exact when they share their bounds (always, within one engine process).
A family exposed as a summary (no buckets) gives no histogram signal. Malformed text raises
``ExpositionError`` with what was wrong; nothing else a target can send escapes as another exception.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.engine.catalogue import (
    AUTO,
    AVERAGED_SIGNALS,
    ENGINE_CATALOGUE,
    SIGNAL_TYPES,
    Catalogue,
    EngineFamilies,
    Signal,
    SignalType,
    Source,
    UnknownEngineError,
    family_key,
    to_canonical,
)

MODEL_LABEL = "model_name"
_SCALAR_TYPES = frozenset({"counter", "gauge", "unknown", "untyped"})
_SUM_TYPES = frozenset({"histogram", "summary"})


class ExpositionError(ValueError):
    """The scraped text is not valid Prometheus exposition, or holds no engine we know."""


@dataclass(frozen=True)
class HistogramData:
    """A cumulative histogram: ``(upper bound, count of observations <= it)`` ascending, ending at +Inf."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True)
class EngineSnapshot:
    """Canonical signals of one scrape. ``at`` is the monotonic time of the scrape, in seconds."""

    kind: str
    at: float
    values: Mapping[Signal, float] = field(default_factory=dict)
    histograms: Mapping[Signal, HistogramData] = field(default_factory=dict)
    # The engine's name each signal was read from, so a renamed variant is visible when debugging.
    sources: Mapping[Signal, str] = field(default_factory=dict)

    def value(self, signal: Signal) -> float | None:
        """The gauge or counter value of ``signal``, or None if this engine did not expose it."""
        return self.values.get(signal)

    def in_engine(self) -> float | None:
        """Requests running plus waiting in the engine, or None when it names neither."""
        counts = [self.values.get(s) for s in (Signal.RUNNING_REQUESTS, Signal.QUEUE_DEPTH)]
        known = [c for c in counts if c is not None]
        return sum(known) if known else None


FamilyIndex = Mapping[str, list[Metric]]
SampleFilter = Callable[[Metric, Sample], bool]


@dataclass(frozen=True)
class _Selector:
    """Which label sets of a family count: the chosen model's, carrying the source's required labels."""

    model: str | None
    labels: tuple[tuple[str, str], ...] = ()

    def __call__(self, sample: Sample) -> bool:
        return _of_model(sample, self.model) and all(sample.labels.get(k) == v for k, v in self.labels)


def parse_exposition(
    text: str,
    at: float,
    *,
    kind: str | EngineFamilies = AUTO,
    model: str | None = None,
    catalogue: Catalogue = ENGINE_CATALOGUE,
) -> EngineSnapshot:
    """Read ``text`` (Prometheus text format) scraped at monotonic time ``at`` into a snapshot.

    ``kind`` is ``auto`` (detect from the family names present), a kind name of ``catalogue`` (the
    engines by default, or the gateways), or a name table of one's own. ``model`` keeps only samples
    whose ``model_name`` is it (or that have none). Raises ``ExpositionError`` for malformed text or
    when nothing is recognised, and ``UnknownEngineError`` for a ``kind`` name that does not exist.
    """
    index = index_families(text)
    table = kind if isinstance(kind, EngineFamilies) else _resolve(kind, index, catalogue)
    values: dict[Signal, float] = {}
    histograms: dict[Signal, HistogramData] = {}
    sources: dict[Signal, str] = {}
    for signal, source in table.sources.items():
        found = _read_signal(index, signal, source, _Selector(model, source.labels))
        if found is None:
            continue
        name, reading = found
        sources[signal] = name
        if isinstance(reading, HistogramData):
            histograms[signal] = reading
        else:
            values[signal] = reading
    return EngineSnapshot(table.kind, at, values, histograms, sources)


def index_families(text: str) -> FamilyIndex:
    """Parsed families by ``family_key``; a name that appears in several blocks keeps them all."""
    index: defaultdict[str, list[Metric]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            index[family_key(family.name)].append(family)
    # The parser signals bad input with ValueError (the only type 60k fuzzed inputs produced), but its
    # helpers also index into strings (``text[0]``); any of these means the target sent something
    # that is not exposition text, so they are one failure of the target, not a crash of ours.
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ExpositionError(f"malformed exposition text: {exc or type(exc).__name__}") from None
    return index


def _resolve(kind: str, index: FamilyIndex, catalogue: Catalogue) -> EngineFamilies:
    if kind != AUTO:
        return catalogue.families_for(kind)
    names = [family.name for families in index.values() for family in families]
    try:
        return catalogue.detect(names)
    except UnknownEngineError as exc:
        raise ExpositionError(str(exc)) from None


def _read_signal(
    index: FamilyIndex, signal: Signal, source: Source, selector: _Selector
) -> tuple[str, float | HistogramData] | None:
    """The first of the source's names that yields a reading, with that reading."""
    for name in source.names:
        families = index.get(family_key(name), [])
        reading = _read(families, signal, source, selector)
        if reading is not None:
            return name, reading
    return None


def _read(
    families: list[Metric], signal: Signal, source: Source, selector: _Selector
) -> float | HistogramData | None:
    if SIGNAL_TYPES[signal] is SignalType.HISTOGRAM:
        return read_histogram(families, selector)
    if source.from_histogram_sum:
        values = _values(families, _SUM_TYPES, _is_sum_sample, selector)
    else:
        values = _values(families, _SCALAR_TYPES, _is_scalar_sample, selector)
    if not values:
        return None
    total = math.fsum(values) / (len(values) if signal in AVERAGED_SIGNALS else 1)
    return to_canonical(total, source.unit)


def _is_sum_sample(family: Metric, sample: Sample) -> bool:
    return sample.name == family.name + "_sum"


def _is_scalar_sample(family: Metric, sample: Sample) -> bool:
    # A counter family also holds ``_created`` samples in some parsers; only the value itself counts.
    return family_key(sample.name) == family_key(family.name)


def _values(
    families: Iterable[Metric],
    types: frozenset[str],
    wanted: SampleFilter,
    selector: _Selector,
) -> list[float]:
    """The finite values of the wanted samples of the selected label sets, one per label set."""
    return [
        float(sample.value)
        for family in families
        if family.type in types
        for sample in family.samples
        if wanted(family, sample) and selector(sample) and math.isfinite(sample.value)
    ]


def read_histogram(families: Iterable[Metric], keep: Callable[[Sample], bool]) -> HistogramData | None:
    """The histogram summed over the label sets that ``keep`` selects; None if there is none."""
    counts: defaultdict[float, float] = defaultdict(float)
    sums: list[float] = []
    totals: list[float] = []
    for family in families:
        if family.type != "histogram":
            continue
        for sample in family.samples:
            if keep(sample):
                _add_histogram_sample(family.name, sample, counts, sums, totals)
    if not counts and not totals:
        return None
    return _complete(counts, math.fsum(sums), math.fsum(totals) if totals else None)


def _add_histogram_sample(
    name: str, sample: Sample, counts: dict[float, float], sums: list[float], totals: list[float]
) -> None:
    value = float(sample.value)
    if sample.name == name + "_sum":
        sums.append(value)
        return
    if sample.name not in (name + "_bucket", name + "_count"):
        return
    if not math.isfinite(value) or value < 0:
        raise ExpositionError(f"{sample.name}: count must be finite and >= 0, got {value}")
    if sample.name == name + "_count":
        totals.append(value)
        return
    counts[_upper_bound(sample)] += value


def _upper_bound(sample: Sample) -> float:
    raw = sample.labels.get("le")
    try:
        bound = float(raw) if raw is not None else math.nan
    except ValueError:
        bound = math.nan
    if math.isnan(bound):
        raise ExpositionError(f'{sample.name}: bucket needs a numeric "le" label, got {raw!r}')
    return bound


def _complete(counts: Mapping[float, float], total_sum: float, total: float | None) -> HistogramData:
    """Sorted buckets ending at +Inf; a missing +Inf bucket is the ``_count``, as the format defines."""
    merged = dict(counts)
    if math.inf not in merged:
        if total is None:
            raise ExpositionError("histogram has neither a +Inf bucket nor a _count")
        merged[math.inf] = total
    buckets = tuple(sorted(merged.items()))
    return HistogramData(buckets, total_sum, merged[math.inf] if total is None else total)


def _of_model(sample: Sample, model: str | None) -> bool:
    return model is None or sample.labels.get(MODEL_LABEL, model) == model
