"""The traffic observer's families: what real user streams showed, in the probes' shapes.

Records come from the observer (``exporter.traffic``) as each exchange ends and wait in a bounded list;
they are evaluated in batches, at the latest when a scrape asks, into a ``ResultStore`` of their own,
keyed (model, api) where the probes' is keyed (target, module): the same ``measure`` under
``traffic.slo``, the same cumulative histograms and counters, the same rolling windows
(``window.probe_window``; all but the fluid token rate, whose search costs more than the rest), so a user's TPOT or fluidity means what a probe's does. A record past the
list's bound makes the batch run at once, so memory stays bounded whatever the scrape interval; a
window's rows are stamped when their batch ran (at most a scrape interval late) and at most
``WINDOW_ROWS`` of the newest are kept per series.

Beside the store it counts what only real traffic has: output tokens by token source, the output
tokens of good requests (goodput), and prompt tokens by whether the stream reported them (``usage``)
or they were estimated from the request body's length (``stats.prompt_ratio``). The estimate is also
what a prefill deadline that depends on the prompt's length is set from. Without goodput bounds in
``traffic.slo``, a request is good when it is fluid: a fluidity-index at the SLO's tier of at least its
``target_fluidity``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from exporter.evaluation import EvaluationSpec, Measured
from exporter.exposition import names, render
from exporter.exposition.collector import WindowFamilies, add_window
from exporter.exposition.families import Families
from exporter.exposition.result_store import ResultStore
from exporter.exposition.store_limits import StoreLimits
from exporter.exposition.traffic_agreement import AgreementCounts
from exporter.exposition.views import SeriesView
from exporter.settings.buckets import HistogramBuckets
from exporter.stats.batch import FloatArray
from exporter.stats.objectives import GoodputBounds
from exporter.stats.prompt_ratio import PromptRatio
from exporter.streams.result import ProbeResult, TokenSource
from exporter.traffic.record import SKIP_REASONS, Observed, StreamEnd

# Records are evaluated SLICE at a time, the event loop let run between slices: a batch holds the loop
# while it is evaluated (~1.5 ms fixed plus ~0.075 ms a record of 200 tokens, measured on a loaded
# 2-core VM), and the observer stamps every user chunk on that loop. 256 at once held it 25-35 ms,
# past the lag rule's 20 ms stall limit (``streams.saturation``): every user stream in flight was
# flagged unreliable. Slices of 32 held it 6-9 ms at the longest, for 1.1-1.4x the CPU a record
# (``bench/traffic_slices.py``).
SLICE: Final = 32
# Records waiting at most: past it (the loop cannot evaluate as fast as users finish), the backlog is
# evaluated at once, so memory stays bounded whatever the load.
PENDING: Final = 4096
# Window rows kept per (model, api): ~160 bytes each (a dozen numbers and three per tier), so ~5 MiB a
# series. A window that held more requests is computed over its newest ones (its requests gauge says
# how many); rate() of the cumulative counters has them all.
WINDOW_ROWS: Final = 32768
USAGE, ESTIMATED = "usage", "estimated"
PROMPT_SOURCES: Final = (USAGE, ESTIMATED)
Key = tuple[str, str]  # (model, api)

TRAFFIC_WINDOW_FAMILIES: Final = WindowFamilies(
    names.TRAFFIC_WINDOW_REQUESTS,
    names.TRAFFIC_WINDOW_FLUIDITY,
    names.TRAFFIC_WINDOW_SERVICE_LEVEL,
    names.TRAFFIC_WINDOW_SLO_MET,
    names.TRAFFIC_WINDOW_GOODPUT,
)
_HISTOGRAMS: Final = {
    "ttft": names.TRAFFIC_TTFT,
    "tbt": names.TRAFFIC_TBT,
    "tpot": names.TRAFFIC_TPOT,
    "e2e": names.TRAFFIC_E2E,
    "normalized_latency": names.TRAFFIC_NORMALIZED_LATENCY,
}


def traffic_goodput(spec: EvaluationSpec) -> GoodputBounds:
    """The bounds a user request is good within: the SLO's goodput bounds, else being fluid."""
    return spec.goodput or GoodputBounds(min_fluidity=spec.deadlines.target_fluidity)


@dataclass
class _Extra:
    """What a (model, api) counts besides the store's figures."""

    output_tokens: Counter[str] = field(default_factory=Counter)  # by token source
    good_output_tokens: int = 0
    prompt_tokens: Counter[str] = field(default_factory=Counter)  # by PROMPT_SOURCES
    ratio: PromptRatio = field(default_factory=PromptRatio)


@dataclass(frozen=True)
class ObserverHealth:
    """The observer's own state at a scrape (``traffic.observer.ObserverCounts``, read by the daemon)."""

    skipped: Mapping[str, int] = field(default_factory=dict)
    in_flight: int = 0
    streams: Mapping[str, int] = field(default_factory=dict)  # by how they ended
    connections: int = 0
    last_message_unix_s: float | None = None


class TrafficStats:
    """Cumulative and window figures of observed requests, per (model, api)."""

    def __init__(
        self,
        spec: EvaluationSpec,
        buckets: HistogramBuckets,
        windows: Mapping[str, float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.goodput = traffic_goodput(spec)
        # What a user request is judged by: the SLO's deadlines and objectives, good within ``goodput``
        self._judged_by = EvaluationSpec(spec.deadlines, spec.slos, self.goodput)
        self.windows = dict(windows)
        longest = max(self.windows.values(), default=3600.0)
        limits = StoreLimits(max_age_s=longest, max_records=WINDOW_ROWS)
        # No fluid token rate: its per-request search was 2/3 of evaluating a request (the loop waits).
        self.store = ResultStore(limits, buckets, clock, fluid_rate=False)
        self._pending: list[Observed] = []
        self._extra: dict[Key, _Extra] = {}
        self._draining: asyncio.Task[None] | None = None

    def add(self, observed: Observed) -> None:
        """One finished user request (the observer's sink). Evaluated in slices on the running loop,
        the loop let run between them; without a loop, or past ``PENDING``, at once."""
        self._pending.append(observed)
        if len(self._pending) >= PENDING:
            self.flush()
        elif len(self._pending) >= SLICE and self._draining is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._draining = loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while len(self._pending) >= SLICE:
                self._evaluate(self._pending[:SLICE])
                del self._pending[:SLICE]
                await asyncio.sleep(0)  # the loop's turn: its reads and timers
        finally:
            self._draining = None

    def flush(self) -> None:
        """Evaluate every waiting record into the figures."""
        pending, self._pending = self._pending, []
        self._evaluate(pending)

    def _evaluate(self, pending: Sequence[Observed]) -> None:
        by_series: dict[Key, list[Observed]] = {}
        for observed in pending:
            by_series.setdefault((observed.model, observed.result.api), []).append(observed)
        for key, records in by_series.items():
            extra = self._extra.setdefault(key, _Extra())
            results = _with_prompt_tokens(extra, records)
            measured, good = self.store.add(*key, results, self._judged_by)
            _count_tokens(extra, measured, good)

    def families(self, health: ObserverHealth, agreement: AgreementCounts | None = None) -> Families:
        """Every traffic family now (the waiting records evaluated first); every outcome, reason and
        source is exported from the start, at 0."""
        self.flush()
        out = Families()
        now = self.store.clock()
        for view in sorted(self.store.series(now), key=lambda v: (v.target, v.module)):
            self._add_series(out, view, now)
        _add_health(out, health)
        if agreement is not None:
            _add_agreement(out, agreement)
        return out

    def _add_series(self, out: Families, view: SeriesView, now: float) -> None:
        key = (view.target, view.module)
        for outcome, count in view.requests.items():
            out.add(names.TRAFFIC_REQUESTS, (*key, outcome.value), count)
        for kind, spec in _HISTOGRAMS.items():
            out.histogram(spec, key, view.histograms[kind])
        for tier, counts in view.fluidity.items():
            out.histogram(names.TRAFFIC_FLUIDITY, (*key, tier), counts)
            out.add(names.TRAFFIC_DEADLINES, (*key, tier), view.deadlines[tier])
            out.add(names.TRAFFIC_DEADLINES_MISSED, (*key, tier), view.deadlines_missed[tier])
        out.add(names.TRAFFIC_GOOD_REQUESTS, key, view.good_requests or 0)
        out.add(names.TRAFFIC_UNRELIABLE, key, view.unreliable)
        extra = self._extra.get(key, _Extra())
        for token_source in TokenSource:
            counted = extra.output_tokens[token_source.value]
            out.add(names.TRAFFIC_OUTPUT_TOKENS, (*key, token_source.value), counted)
        out.add(names.TRAFFIC_GOOD_OUTPUT_TOKENS, key, extra.good_output_tokens)
        for source in PROMPT_SOURCES:
            out.add(names.TRAFFIC_PROMPT_TOKENS, (*key, source), extra.prompt_tokens[source])
        for label, seconds in self.windows.items():
            window = self.store.window(*key, seconds, now)
            if window is not None:
                add_window(out, (*key, label), window, TRAFFIC_WINDOW_FAMILIES)

    def render_text(self, health: ObserverHealth, agreement: AgreementCounts | None = None) -> str:
        """The families as /metrics text."""
        return render.render(self.families(health, agreement))


def _with_prompt_tokens(extra: _Extra, records: Sequence[Observed]) -> list[ProbeResult]:
    """The records' results, each with its prompt length: reported ones teach the ratio first, then the
    others are estimated from their body's length (``prompt_tokens_intended``, which a prefill deadline
    reads when none was reported)."""
    for record in records:
        reported = record.result.prompt_tokens_reported
        if reported is not None:
            extra.ratio = extra.ratio.learn(reported, record.request_bytes)
            extra.prompt_tokens[USAGE] += reported
    results = []
    for record in records:
        result = record.result
        if result.prompt_tokens_reported is None:
            estimate = extra.ratio.estimate(record.request_bytes)
            result.prompt_tokens_intended = estimate
            extra.prompt_tokens[ESTIMATED] += estimate
        results.append(result)
    return results


def _count_tokens(extra: _Extra, measured: Measured, good: FloatArray) -> None:
    tokens = measured.latency.tokens
    for result, count in zip(measured.results, tokens.tolist(), strict=True):
        extra.output_tokens[result.token_source.value] += int(count)
    good_completed = np.nan_to_num(good[: len(tokens)]) > 0
    extra.good_output_tokens += int(tokens[good_completed].sum())


def _add_health(out: Families, health: ObserverHealth) -> None:
    for reason in SKIP_REASONS:
        out.add(names.TRAFFIC_SKIPPED, (reason,), health.skipped.get(reason, 0))
    out.add(names.TRAFFIC_IN_FLIGHT, (), health.in_flight)
    for end in StreamEnd:
        out.add(names.TRAFFIC_ENVOY_STREAMS, (end.value,), health.streams.get(end.value, 0))
    out.add(names.TRAFFIC_ENVOY_CONNECTIONS, (), health.connections)
    if health.last_message_unix_s is not None:
        out.add(names.TRAFFIC_LAST_MESSAGE, (), health.last_message_unix_s)


def _add_agreement(out: Families, agreement: AgreementCounts) -> None:
    out.add(names.TRAFFIC_PROBE_COMPARED, (), agreement.compared)
    out.histogram(names.TRAFFIC_PROBE_GAP_DIFFERENCE, (), agreement.gap_differences)
    out.add(names.TRAFFIC_PROBE_VERDICT_DIFFERENCES, (), agreement.verdict_differences)
    for side, count in sorted(agreement.unmatched.items()):
        out.add(names.TRAFFIC_PROBE_UNMATCHED, (side,), count)
