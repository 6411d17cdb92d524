"""The observer's accuracy, checked all the time: its view of each of the exporter's own probe requests
against the probe client's, joined on the id the client sends in ``X-Fluidity-Probe``.

Both views are ``ProbeResult``s stamped by the same process's ``time.perf_counter``: the client stamps
each socket read, the observer each message Envoy sent it about the same stream. ``compare`` (pure)
gives the per-gap differences and whether the two views judge the request fluid alike;
``ProbeAgreement`` waits for the other side of each request (holding only its stamps and verdict) (at most ``JOIN_WAIT_S``, at most
``MAX_WAITING`` requests a side, the rest counted unmatched) and accumulates what the comparisons found.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from exporter.evaluation import EvaluationSpec, measure, slo_tier
from exporter.exposition.views import Histogram, HistogramCounts
from exporter.stats.batch import FloatArray
from exporter.streams.result import ProbeResult

# |observer gap - client gap|: Envoy adds tens of microseconds on loopback, a late loop milliseconds; the
# bounds are dense below 1 ms (the accuracy goal: p50 <= 0.1 ms, p99 <= 1 ms) and coarse above.
GAP_DIFFERENCE_BUCKETS: Final = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
)  # fmt: skip
JOIN_WAIT_S: Final = 120.0  # a probe run's results come when its last request ends: a minute is long
MAX_WAITING: Final = 4096  # requests waiting for their other side, per side: ~8 bytes a token each
OBSERVER, CLIENT = "observer", "client"


@dataclass(frozen=True)
class Comparison:
    """One probe request as both sides saw it."""

    gap_differences: FloatArray  # |observer - client| per gap between token events; empty: not comparable
    verdict_differs: bool


def fluid(result: ProbeResult, spec: EvaluationSpec) -> bool:
    """The fluidity verdict of one request: completed, and its fluidity-index at the SLO's tier
    (``evaluation.slo_tier``) at least the target fluidity."""
    tier = slo_tier(spec.deadlines)
    measured = measure([result], spec)
    if tier is None or not measured.results:
        return False
    return bool(measured.tiers[tier].fluidity[0] >= spec.deadlines.target_fluidity)


@dataclass(frozen=True, eq=False)
class View:
    """What one side saw of a request, as much as the comparison needs: its token events' stamps and
    its fluidity verdict (a waiting side holds this, not its whole result)."""

    times: FloatArray
    fluid: bool

    @classmethod
    def of(cls, result: ProbeResult, spec: EvaluationSpec) -> View:
        return cls(np.asarray(result.token_times, dtype=np.float64), fluid(result, spec))


def compare_views(observed: View, client: View) -> Comparison:
    """The observer's view of a request against its client's. Gaps are compared only when both saw the
    same number of token events (else one of them missed or split some, and no gap pairs up)."""
    ours, theirs = observed.times, client.times
    comparable = len(ours) == len(theirs) >= 2
    differences = np.abs(np.diff(ours) - np.diff(theirs)) if comparable else np.zeros(0)
    return Comparison(differences, observed.fluid != client.fluid)


def compare(observed: ProbeResult, client: ProbeResult, spec: EvaluationSpec) -> Comparison:
    """``compare_views`` of two results, each judged under ``spec``."""
    return compare_views(View.of(observed, spec), View.of(client, spec))


@dataclass(frozen=True)
class AgreementCounts:
    """What the comparisons found so far."""

    compared: int
    verdict_differences: int
    gap_differences: HistogramCounts
    unmatched: dict[str, int]


class ProbeAgreement:
    """Joins each probe request's two views by id and keeps what their comparison found."""

    def __init__(self, spec: EvaluationSpec, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.clock = clock
        self._waiting: dict[str, OrderedDict[str, tuple[float, View]]] = {
            OBSERVER: OrderedDict(),
            CLIENT: OrderedDict(),
        }
        self._gaps = Histogram(GAP_DIFFERENCE_BUCKETS)
        self._compared = 0
        self._differed = 0
        self._unmatched: Counter[str] = Counter({OBSERVER: 0, CLIENT: 0})

    def observed(self, probe_id: str, result: ProbeResult) -> None:
        """The observer's record of a probe request."""
        self._arrive(OBSERVER, probe_id, result)

    def client_results(self, results: Sequence[ProbeResult]) -> None:
        """A probe run's results, as its client recorded them (those without an id are not a probe's
        requests through a client that marks them)."""
        for result in results:
            probe_id = result.extra.get("probe_id")
            if isinstance(probe_id, str):
                self._arrive(CLIENT, probe_id, result)

    def _arrive(self, side: str, probe_id: str, result: ProbeResult) -> None:
        now = self.clock()
        self._expire(now)
        other = self._waiting[CLIENT if side == OBSERVER else OBSERVER]
        match = other.pop(probe_id, None)
        seen = View.of(result, self.spec)
        if match is None:
            waiting = self._waiting[side]
            waiting[probe_id] = (now, seen)
            if len(waiting) > MAX_WAITING:
                waiting.popitem(last=False)
                self._unmatched[side] += 1
            return
        observed, client = (seen, match[1]) if side == OBSERVER else (match[1], seen)
        self._record(compare_views(observed, client))

    def _record(self, comparison: Comparison) -> None:
        self._compared += 1
        self._differed += comparison.verdict_differs
        self._gaps.observe(comparison.gap_differences)

    def _expire(self, now: float) -> None:
        for side, waiting in self._waiting.items():
            while waiting and now - next(iter(waiting.values()))[0] > JOIN_WAIT_S:
                waiting.popitem(last=False)
                self._unmatched[side] += 1

    def counts(self) -> AgreementCounts:
        """The comparisons so far (requests waiting too long counted unmatched first)."""
        self._expire(self.clock())
        return AgreementCounts(self._compared, self._differed, self._gaps.snapshot(), dict(self._unmatched))
