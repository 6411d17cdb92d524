"""Service-level objectives over per-request metrics, and goodput.

An SLO such as ``ttft:p99<=0.5`` means "at least 99% of requests have a TTFT of at most 0.5 s", so it
is checked with the nearest-rank percentile (an observed value), not an interpolated one. Fluidity is the
one higher-is-better metric: ``fluidity:p99>=0.9`` means at least 99% of requests reach a
fluidity-index of 0.9.

Goodput counts the requests that meet every configured per-request bound at once (as DistServe and
vLLM's benchmark define it). A NaN metric value means the metric does not apply to that request (TPOT of
a one-token request), and a bound that does not apply counts as met.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from exporter.stats.distribution import nearest_rank, without_nan


class SloMetric(StrEnum):
    """A per-request metric an SLO or a goodput bound can constrain."""

    TTFT = "ttft"
    TBT = "tbt"
    TPOT = "tpot"
    E2E = "e2e"
    NORMALIZED_LATENCY = "normalized_latency"
    FLUIDITY = "fluidity"

    @property
    def higher_is_better(self) -> bool:
        """True for fluidity; every latency metric is lower-is-better."""
        return self is SloMetric.FLUIDITY

    @property
    def operator(self) -> str:
        """The comparison an SLO on this metric is written with."""
        return ">=" if self.higher_is_better else "<="


VALID_METRICS: Final = ", ".join(sorted(m.value for m in SloMetric))

# Per-token decode deadlines (seconds between tokens) of the Etalon paper's strict, medium and relaxed
# service tiers.
DECODE_TIERS: Final[Mapping[str, float]] = MappingProxyType({"strict": 0.025, "medium": 0.05, "relaxed": 0.1})
# The tier fluidity SLOs and goodput are judged at when none is named (a capacity search's default too).
DEFAULT_DECODE_TIER: Final = "medium"
# The fluidity SLO every reader (daemon config, jobs API, flags) and every judge defaults to, defined
# here once: the paper's "99% of requests reach a fluidity-index of 0.9", with a constant Dp of 1 s.
DEFAULT_TARGET_FLUIDITY: Final = 0.9
DEFAULT_PERCENTILE: Final = 99.0
DEFAULT_PREFILL_DEADLINE_S: Final = 1.0

_PERCENTILE = re.compile(r"p(?P<number>[0-9]+(?:\.[0-9]+)?)")


@dataclass(frozen=True)
class Objective:
    """At least ``percentile`` % of requests have ``metric`` on the good side of ``threshold``."""

    metric: SloMetric
    percentile: float
    threshold: float

    def __post_init__(self) -> None:
        if not 0.0 < self.percentile <= 100.0:
            raise ValueError(f"SLO percentile must be in (0, 100], got {self.percentile!r}")
        if not (math.isfinite(self.threshold) and self.threshold >= 0.0):
            raise ValueError(f"SLO threshold must be finite and >= 0, got {self.threshold!r}")

    def __str__(self) -> str:
        percentile, threshold = _shortest(self.percentile), _shortest(self.threshold)
        return f"{self.metric.value}:p{percentile}{self.metric.operator}{threshold}"


@dataclass(frozen=True)
class ObjectiveResult:
    """How one SLO fared: the observed nearest-rank value against the threshold."""

    objective: Objective
    observed: float
    threshold: float
    met: bool
    sample_count: int


@dataclass(frozen=True)
class GoodputBounds:
    """Per-request bounds (``None`` = not checked); ``max_tbt`` bounds each request's largest gap."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    max_tbt: float | None = None
    normalized_latency: float | None = None
    min_fluidity: float | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None and not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"goodput bound {field.name} must be finite and >= 0, got {value!r}")

    def configured(self) -> list[tuple[SloMetric, float]]:
        """The bounds that are set, as (metric, bound) pairs."""
        pairs = [(metric, getattr(self, name)) for name, metric in _BOUND_METRICS.items()]
        return [(metric, bound) for metric, bound in pairs if bound is not None]


_BOUND_METRICS: Final = {
    "ttft": SloMetric.TTFT,
    "tpot": SloMetric.TPOT,
    "e2e": SloMetric.E2E,
    "max_tbt": SloMetric.TBT,
    "normalized_latency": SloMetric.NORMALIZED_LATENCY,
    "min_fluidity": SloMetric.FLUIDITY,
}


@dataclass(frozen=True)
class Goodput:
    """``good`` of ``total`` requests met every bound; ``rate_per_s`` is good requests per second."""

    good: int
    total: int
    ratio: float
    rate_per_s: float


def parse_objective(text: str) -> Objective:
    """Parse ``metric:pNN<=threshold`` (``>=`` for fluidity): ``ttft:p99<=0.5``, ``fluidity:p99>=0.9``."""
    metric_part, sep, rest = text.strip().partition(":")
    if not sep:
        raise ValueError(f'SLO "{text}" must look like metric:pNN<=threshold, e.g. ttft:p99<=0.5')
    metric = parse_metric(metric_part.strip())
    percentile_part, operator, threshold_part = _split_comparison(text, rest)
    if operator != metric.operator:
        raise ValueError(
            f'SLO "{text}": {metric.value} is {"higher" if metric.higher_is_better else "lower"}-is-better, '
            f"so its bound is written with {metric.operator}, not {operator}"
        )
    return Objective(metric, _parse_percentile(text, percentile_part), _parse_threshold(text, threshold_part))


def parse_metric(name: str) -> SloMetric:
    """The metric called ``name``; the error lists the valid names."""
    try:
        return SloMetric(name)
    except ValueError:
        raise ValueError(f'unknown SLO metric "{name}"; valid: {VALID_METRICS}') from None


def evaluate_objective(slo: Objective, values: ArrayLike) -> ObjectiveResult:
    """Check ``slo`` against one value per request; NaN values (metric not applicable) are ignored."""
    sample = without_nan(values)
    if len(sample) == 0:
        return ObjectiveResult(slo, math.nan, slo.threshold, False, 0)
    higher = slo.metric.higher_is_better
    observed = nearest_rank(sample, slo.percentile / 100.0, largest=higher)
    met = observed >= slo.threshold if higher else observed <= slo.threshold
    return ObjectiveResult(slo, observed, slo.threshold, bool(met), len(sample))


def evaluate_objectives(
    slos: Iterable[Objective], metric_values: Mapping[SloMetric, ArrayLike]
) -> list[ObjectiveResult]:
    """Check every SLO against the per-request values of its metric."""
    return [evaluate_objective(slo, _metric_values(metric_values, slo.metric)) for slo in slos]


def with_failed(
    metric_values: Mapping[SloMetric, ArrayLike], failed: int
) -> dict[SloMetric, NDArray[np.float64]]:
    """``metric_values`` with ``failed`` requests added at the worst value of every metric (fluidity 0,
    each latency infinite): a failed or timed-out request counts against every objective, so that a
    target failing half its requests cannot meet ``fluidity:p50>=0.9`` on the half that completed."""
    return {
        metric: np.concatenate(
            [np.asarray(v, dtype=np.float64), np.full(failed, 0.0 if metric.higher_is_better else math.inf)]
        )
        for metric, v in metric_values.items()
    }


def goodput(
    bounds: GoodputBounds, per_request_values: Mapping[SloMetric, ArrayLike], duration_s: float
) -> Goodput:
    """Requests meeting every configured bound, of all requests, over ``duration_s`` seconds.

    ``per_request_values`` holds one value per request for each bounded metric, in the same request
    order; for ``SloMetric.TBT`` that value is the request's largest gap (``LatencyBatch.max_tbt``).
    """
    if not (math.isfinite(duration_s) and duration_s > 0.0):
        raise ValueError(f"goodput duration_s must be finite and > 0, got {duration_s!r}")
    good_mask = good_requests(bounds, per_request_values)
    total, good = len(good_mask), int(np.count_nonzero(good_mask))
    return Goodput(good, total, good / total if total else math.nan, good / duration_s)


def good_requests(
    bounds: GoodputBounds, per_request_values: Mapping[SloMetric, ArrayLike]
) -> NDArray[np.bool_]:
    """Per request, whether it meets every configured bound (``goodput``'s verdict, request by request)."""
    good_mask = np.ones(_request_count(per_request_values), dtype=np.bool_)
    for metric, bound in bounds.configured():
        good_mask &= _meets(_metric_values(per_request_values, metric), metric, bound)
    return good_mask


def decode_tier(name: str, tiers: Mapping[str, float] = DECODE_TIERS) -> float:
    """The per-token decode deadline in seconds of the named tier: Etalon's, or of ``tiers`` (a
    target's own, with Etalon's)."""
    try:
        return tiers[name]
    except KeyError:
        valid = ", ".join(tiers)
        raise ValueError(f'unknown decode tier "{name}"; valid: {valid}') from None


def _shortest(value: float) -> str:
    # repr is the shortest text that parses back to the same float; "99.0" reads better as "99".
    return repr(value).removesuffix(".0")


def _split_comparison(text: str, rest: str) -> tuple[str, str, str]:
    match = re.fullmatch(r"\s*([^<>=]*?)\s*(<=|>=)\s*(.*?)\s*", rest)
    if match is None:
        raise ValueError(f'SLO "{text}" needs a bound written pNN<=threshold or pNN>=threshold')
    percentile_part, operator, threshold_part = match.groups()
    return percentile_part, operator, threshold_part


def _parse_percentile(text: str, part: str) -> float:
    match = _PERCENTILE.fullmatch(part)
    value = float(match["number"]) if match else math.nan
    if not 0.0 < value <= 100.0:
        raise ValueError(
            f'SLO "{text}": percentile "{part}" must be p followed by a number in (0, 100], e.g. p99'
        )
    return value


def _parse_threshold(text: str, part: str) -> float:
    try:
        value = float(part)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f'SLO "{text}": threshold "{part}" must be a finite number >= 0')
    return value


def _metric_values(values: Mapping[SloMetric, ArrayLike], metric: SloMetric) -> ArrayLike:
    if metric not in values:
        given = ", ".join(sorted(m.value for m in values)) or "none"
        raise ValueError(f'no values for SLO metric "{metric.value}"; given: {given}')
    return values[metric]


def _request_count(values: Mapping[SloMetric, ArrayLike]) -> int:
    counts = {metric: np.asarray(v).reshape(-1).shape[0] for metric, v in values.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{m.value}={n}" for m, n in sorted(counts.items()))
        raise ValueError(f"per-request values must have one entry per request; got {detail}")
    return next(iter(counts.values()), 0)


def _meets(values: ArrayLike, metric: SloMetric, bound: float) -> NDArray[np.bool_]:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    within = v >= bound if metric.higher_is_better else v <= bound
    # Comparisons with NaN are false; NaN means the metric does not apply, which meets the bound.
    return within | np.isnan(v)
