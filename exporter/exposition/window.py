"""Per-request records of the recent past, and the figures a rolling window shows, computed on scrape.

``Records`` is an immutable set of equal-length numpy columns, one row per probe request, oldest first:
the time the row was stored, the outcome, and the per-request values ``exporter.stats`` computed when
the run was added (latency figures, fluidity and deadline counts per tier, the minimum decode deadline,
the goodput verdict, the prober's own lateness). A failed request has a row too (its outcome counts)
with NaN in every measured column. Keeping a dozen numbers per request instead of its intervals keeps
memory small and fixed per row: a thousand rows are about 150 KB whatever the output lengths.

``probe_window`` turns the rows of one window into its figures with ``exporter.stats`` functions
(nearest-rank quantiles, ``FluidityBatch.service_level``, ``evaluate_objectives``). Two figures are
necessarily per-request reductions of what the report computes from intervals:

* the fluid token rate is ``1 / nearest_rank(minimum decode deadlines, percentile)``, the last step of
  ``fluid_token_rate``, over minima ``min_decode_deadlines`` computed when each run was added;
* a TBT SLO is checked against each request's longest gap (the goodput definition), not against the
  pooled gaps as the one-shot report does: the pooled gaps are the intervals this store does not keep.

The SLOs are judged over every request of the window, a failed one at the worst value of each metric,
as ``bench --objective`` and a capacity trial judge them; the fluidity percentiles and service levels
are figures of the completed requests, as the one-shot report's are (the counts by outcome say how
many failed).
  The cumulative ``fluidity_probe_tbt_seconds`` histogram has every gap.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from exporter.engine.derive import DEFAULT_QUANTILES
from exporter.evaluation import DeadlinePolicy, slo_tier
from exporter.stats.accounting import FluidityBatch
from exporter.stats.batch import FloatArray
from exporter.stats.distribution import nearest_rank, without_nan
from exporter.stats.objectives import (
    GoodputBounds,
    Objective,
    ObjectiveResult,
    SloMetric,
    evaluate_objectives,
    with_failed,
)
from exporter.streams.result import Outcome

OUTCOMES: Final = tuple(Outcome)
OUTCOME_CODE: Final = {outcome: code for code, outcome in enumerate(OUTCOMES)}

# Column names; per-tier columns are "<kind>:<tier>".
AT, OUTCOME, TOKENS = "at", "outcome", "tokens"
TTFT, TPOT, E2E, NORMALIZED, MAX_TBT = "ttft", "tpot", "e2e", "normalized_latency", "max_tbt"
MIN_DECODE_DEADLINE, LATENESS, GOOD = "min_decode_deadline", "lateness", "good"
FLUIDITY, MISSED, DEADLINES = "fluidity", "missed", "deadlines"
SCALAR_COLUMNS: Final = (
    AT,
    OUTCOME,
    TOKENS,
    TTFT,
    TPOT,
    E2E,
    NORMALIZED,
    MAX_TBT,
    MIN_DECODE_DEADLINE,
    LATENESS,
    GOOD,
)

DEFAULT_FLUIDITY_QUANTILES: Final = (0.01, 0.05, 0.1, 0.5)
DEFAULT_LATENESS_QUANTILES: Final = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class PublishedQuantiles:
    """Which quantiles the window gauges publish: of the requests' fluidity (higher is better, so
    0.01 is the level 99% reach), of the client's send lateness, of the engine's own histograms, and
    the client's TTFT quantile set beside the engine's."""

    fluidity: tuple[float, ...] = DEFAULT_FLUIDITY_QUANTILES
    lateness: tuple[float, ...] = DEFAULT_LATENESS_QUANTILES
    engine: tuple[float, ...] = DEFAULT_QUANTILES
    client_ttft: float = 0.5

    def __post_init__(self) -> None:
        check_quantiles("fluidity", self.fluidity, allow_zero=True)
        check_quantiles("lateness", self.lateness, allow_zero=False)
        check_quantiles("engine", self.engine, allow_zero=True)
        check_quantiles("client TTFT", (self.client_ttft,), allow_zero=True)


def check_quantiles(name: str, quantiles: Sequence[float], *, allow_zero: bool) -> None:
    """Every one of ``quantiles`` in [0, 1] (or (0, 1]); the error names which ``name`` it is."""
    low = "[0" if allow_zero else "(0"
    for q in quantiles:
        if not (math.isfinite(q) and (q >= 0 if allow_zero else q > 0) and q <= 1):
            raise ValueError(f"{name} quantiles: {q!r} is not a quantile in {low}, 1]")


PUBLISHED_QUANTILES: Final = PublishedQuantiles()


def tier_column(kind: str, tier: str) -> str:
    """The name of a per-tier column (``fluidity``, ``missed`` or ``deadlines`` of ``tier``)."""
    return f"{kind}:{tier}"


@dataclass(frozen=True, eq=False)
class Records:
    """Rows of per-request values, oldest first; ``columns[AT]`` is non-decreasing. Never mutated."""

    tiers: tuple[str, ...]
    columns: Mapping[str, NDArray[np.generic]]

    @classmethod
    def empty(cls, tiers: Sequence[str]) -> Records:
        """No rows, with the columns of ``tiers``."""
        names = [*SCALAR_COLUMNS, *(tier_column(k, t) for t in tiers for k in (FLUIDITY, MISSED, DEADLINES))]
        columns = {name: np.empty(0, dtype=_dtype(name)) for name in names}
        return cls(tuple(tiers), columns)

    def __len__(self) -> int:
        return len(self.columns[AT])

    def column(self, name: str) -> FloatArray:
        """A float column (read-only)."""
        return self.columns[name]  # type: ignore[return-value]

    @property
    def at(self) -> FloatArray:
        return self.column(AT)

    @property
    def outcome_codes(self) -> NDArray[np.int8]:
        return self.columns[OUTCOME]  # type: ignore[return-value]

    @property
    def completed(self) -> NDArray[np.bool_]:
        """Rows of requests that streamed to completion (their TTFT is known)."""
        return ~np.isnan(self.column(TTFT))

    def since(self, start: float) -> Records:
        """The rows stored at or after ``start``."""
        first = int(np.searchsorted(self.at, start, side="left"))
        return self if first == 0 else self._slice(first)

    def newest(self, count: int) -> Records:
        """At most the ``count`` newest rows."""
        return self if len(self) <= count else self._slice(len(self) - count)

    def append(self, other: Records) -> Records:
        """These rows followed by ``other`` 's (same tiers)."""
        if other.tiers != self.tiers:
            raise ValueError(f"cannot append rows of tiers {other.tiers} to rows of tiers {self.tiers}")
        joined = {
            name: np.concatenate([column, other.columns[name]]) for name, column in self.columns.items()
        }
        return Records(self.tiers, _frozen(joined))

    def _slice(self, first: int) -> Records:
        # A copy, not a view: a view would keep the whole old array alive.
        return Records(
            self.tiers, _frozen({name: column[first:].copy() for name, column in self.columns.items()})
        )


def build_records(tiers: Sequence[str], columns: Mapping[str, ArrayLike]) -> Records:
    """Records from freshly computed columns (each cast to its dtype and frozen)."""
    typed = {name: np.asarray(values, dtype=_dtype(name)) for name, values in columns.items()}
    expected = set(Records.empty(tiers).columns)
    if set(typed) != expected:
        raise ValueError(f"record columns {sorted(typed)} differ from the expected {sorted(expected)}")
    if len({len(column) for column in typed.values()}) > 1:
        raise ValueError("record columns must all have one entry per request")
    return Records(tuple(tiers), _frozen(typed))


_DTYPES: Final[Mapping[str, type[np.generic]]] = {OUTCOME: np.int8, TOKENS: np.int64}


def _dtype(name: str) -> type[np.generic]:
    return _DTYPES.get(name, np.float64)


def _frozen(columns: dict[str, NDArray[np.generic]]) -> dict[str, NDArray[np.generic]]:
    for column in columns.values():
        column.flags.writeable = False
    return columns


@dataclass(frozen=True, eq=False)
class ProbeWindow:
    """Figures over the requests of one rolling window (an absent figure had no data)."""

    requests: Mapping[Outcome, int]
    fluidity: Mapping[str, Mapping[float, float]] = field(default_factory=dict)  # tier -> quantile -> value
    service_level: Mapping[str, float] = field(default_factory=dict)  # tier -> ratio
    fluid_token_rate: float | None = None
    slos: tuple[ObjectiveResult, ...] = ()
    goodput_ratio: float | None = None
    lateness: Mapping[float, float] = field(default_factory=dict)  # quantile -> seconds
    client_ttfts: FloatArray = field(default_factory=lambda: np.zeros(0))


def probe_window(
    records: Records,
    policy: DeadlinePolicy,
    slos: Sequence[Objective] = (),
    goodput: GoodputBounds | None = None,
    quantiles: PublishedQuantiles = PUBLISHED_QUANTILES,
) -> ProbeWindow:
    """The figures of a window whose rows are ``records`` (already cut to the window)."""
    counts = np.bincount(records.outcome_codes.astype(np.int64), minlength=len(OUTCOMES))
    done = _rows(records, records.completed)
    ttfts = done.column(TTFT)
    lateness = without_nan(records.column(LATENESS))
    return ProbeWindow(
        requests={outcome: int(counts[code]) for outcome, code in OUTCOME_CODE.items()},
        fluidity={t: _fluidity_quantiles(done, t, quantiles.fluidity) for t in done.tiers if len(done)},
        service_level=_service_levels(done),
        fluid_token_rate=_fluid_token_rate(done.column(MIN_DECODE_DEADLINE), policy.percentile),
        slos=_slo_results(slos, done, len(records) - len(done), policy),
        goodput_ratio=_goodput_ratio(records) if goodput is not None and len(records) else None,
        lateness={q: nearest_rank(lateness, q) for q in quantiles.lateness} if len(lateness) else {},
        client_ttfts=ttfts,
    )


def _rows(records: Records, mask: NDArray[np.bool_]) -> Records:
    return Records(records.tiers, {name: column[mask] for name, column in records.columns.items()})


def _fluidity_quantiles(done: Records, tier: str, quantiles: Sequence[float]) -> dict[float, float]:
    # Fluidity is higher-is-better: the q quantile is the value that a share 1 - q of the requests reach
    # or exceed, the same nearest rank an SLO fluidity:pNN>=X is checked with.
    values = done.column(tier_column(FLUIDITY, tier))
    return {q: nearest_rank(values, 1.0 - q, largest=True) for q in quantiles}


def _service_levels(done: Records) -> dict[str, float]:
    """Each tier's token-weighted level over the completed requests; a tier without one accounted
    deadline (no completed request) has no level, not a perfect one."""
    levels = {tier: _service_level(done, tier) for tier in done.tiers}
    return {tier: level for tier, level in levels.items() if level is not None}


def _service_level(done: Records, tier: str) -> float | None:
    accounting = dataclasses.replace(
        FluidityBatch.empty(len(done)),
        missed=done.column(tier_column(MISSED, tier)),
        total=done.column(tier_column(DEADLINES, tier)),
    )
    return accounting.service_level


def _fluid_token_rate(minima: FloatArray, percentile: float) -> float | None:
    """``fluid_token_rate`` from per-request minimum decode deadlines (NaN: fewer than two tokens)."""
    usable = without_nan(minima)
    if len(usable) == 0:
        return None
    deadline = nearest_rank(usable, percentile / 100.0)
    return 1.0 / deadline if deadline > 0 else math.inf


def _slo_results(
    slos: Sequence[Objective], done: Records, failed: int, policy: DeadlinePolicy
) -> tuple[ObjectiveResult, ...]:
    """Each SLO judged as ``bench --objective`` and a capacity trial judge it: over every request of
    the window, a failed one at the worst value of every metric (``with_failed``), so that a target
    failing half its probes cannot meet ``fluidity:p50>=0.9`` on the half that completed. An SLO with
    no request to judge has no result."""
    results = evaluate_objectives(slos, with_failed(_slo_values(done, policy), failed))
    return tuple(r for r in results if r.sample_count)


def _slo_values(done: Records, policy: DeadlinePolicy) -> dict[SloMetric, FloatArray]:
    tier = slo_tier(policy)
    fluidity = done.column(tier_column(FLUIDITY, tier)) if tier in done.tiers else np.zeros(0)
    return {
        SloMetric.TTFT: done.column(TTFT),
        SloMetric.TBT: done.column(MAX_TBT),
        SloMetric.TPOT: done.column(TPOT),
        SloMetric.E2E: done.column(E2E),
        SloMetric.NORMALIZED_LATENCY: done.column(NORMALIZED),
        SloMetric.FLUIDITY: fluidity,
    }


def _goodput_ratio(records: Records) -> float:
    good = records.column(GOOD)
    return float(np.nansum(good)) / len(good)
