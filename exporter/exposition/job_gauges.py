"""Gauges of job results: the latest capacity search per (target, module), the stored prefill profiles,
and how many jobs finished and run; beside them, what each target declares or says of itself (its
GPUs, the context it serves), the denominators and limits those results are read against.

The job runner keeps its results as the plain snapshots defined here; ``JobsCollector`` asks a callable
for the current ``JobsSnapshot`` on every scrape and builds fresh families from it (nothing global is
mutated, as in ``exporter.exposition.collector``). This module knows nothing of how jobs run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporter.exposition import names
from exporter.exposition.families import Families, new_family
from exporter.stats.prefill import PrefillModel

# Where fluidity_prefill_profile_predicted_seconds is shown: the default profiling ladder's span, at
# the lengths dashboards compare (short chat, typical RAG, long context).
REFERENCE_PROMPT_TOKENS = (128, 512, 1024, 2048, 4096, 8192, 16384)
# The states of fluidity_capacity_state, every one exported (0 or 1) so a dashboard can read any of them
# (exporter.jobs.capacity_search.State: exposition does not import jobs).
CAPACITY_STATES = ("found", "lower_bound", "not_met", "inconclusive")
# The reasons of fluidity_capacity_stopped_by: what can end a search whose job succeeded
# (exporter.jobs.capacity_result.STOP_KINDS less the shard and no-data stops, which fail the job).
CAPACITY_STOPS = ("converged", "floor", "max_load", "max_trials", "time_budget", "max_tokens")


@dataclass(frozen=True)
class TrialPoint:
    """One trial of a capacity search: the load it ran, whether the SLO held, and by how much."""

    index: int
    load: float
    passed: bool
    headroom: float | None = None  # >1: every deadline could be this much tighter and still pass


@dataclass(frozen=True)
class CapacitySnapshot:
    """The outcome of the latest capacity search of (target, module).

    ``load_kind`` is "rate" (requests/s) or "concurrency" (requests in flight); ``capacity`` is the
    measured capacity, None unless ``state`` is "found"; ``lower_bound`` and ``upper_bound`` bracket it
    whatever the state. The figures measured at the lower bound are None when not measured; ``costs``
    maps "capacity" and "highest_load" to their fluid goodput, tokens per GPU-second and token cost.
    """

    target: str
    module: str
    load_kind: str
    capacity: float | None
    fluid_token_rate: float | None
    goodput_ratio: float | None
    goodput_rate: float | None
    finished_at: float  # unix time
    trials: tuple[TrialPoint, ...] = ()
    state: str | None = None  # None: "found" with a capacity, else "not_met"
    lower_bound: float | None = None
    upper_bound: float | None = None
    costs: Mapping[str, CostPoint] = field(default_factory=dict)
    unreliable_timings: bool = False  # an end's trial had requests the client flagged past the bound
    stopped_by: str | None = None  # what ended it, one of CAPACITY_STOPS (None: not known)
    # The engine model's prediction: estimate, low and high (requests/s), and its error against the
    # lower bound; empty when the search made none
    predicted: Mapping[str, float] = field(default_factory=dict)
    prediction_error: float | None = None


@dataclass(frozen=True)
class CostPoint:
    """What the load at one point of a search yields: fluid goodput, per GPU-second, per token cost."""

    fluid_goodput_tokens_per_s: float | None
    tokens_per_gpu_second: float | None = None
    token_cost: float | None = None


@dataclass(frozen=True)
class ProfileSnapshot:
    """A target's stored prefill profile."""

    target: str
    model: PrefillModel
    measured_at: float  # unix time


@dataclass(frozen=True)
class JobCounts:
    """Jobs finished since start by (target, kind, state), and running now by (target, kind).

    List every (target, kind, state) a job can end in from the start, with 0, so that ``rate()`` sees
    each series begin at 0 instead of appearing with its first increment.
    """

    finished: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    running: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class JobsSnapshot:
    """Everything ``JobsCollector`` shows, taken at one instant."""

    capacity: tuple[CapacitySnapshot, ...] = ()
    profiles: tuple[ProfileSnapshot, ...] = ()
    counts: JobCounts = field(default_factory=JobCounts)
    gpus: Mapping[str, float] = field(default_factory=dict)  # target -> declared accelerators
    contexts: Mapping[str, int] = field(default_factory=dict)  # target -> the context it said it serves
    over_context: tuple[tuple[str, str], ...] = ()  # (target, module) none of whose requests fit it
    unwritten: Mapping[str, bool] = field(default_factory=dict)  # state_dir folder -> its last write failed


class JobsCollector(Collector):
    """The ``fluidity_capacity_*``, ``fluidity_prefill_profile_*`` and job-count families of
    ``snapshot()``, built afresh on every scrape."""

    def __init__(self, snapshot: Callable[[], JobsSnapshot]) -> None:
        self.snapshot = snapshot

    def describe(self) -> Iterator[Metric]:
        """Every family this collector may yield, empty (registering never calls ``snapshot``)."""
        for spec in names.JOB_RESULTS:
            yield new_family(spec)

    def collect(self) -> Iterator[Metric]:
        yield from build_families(self.snapshot())


def build_families(snapshot: JobsSnapshot) -> Families:
    """The families of one snapshot."""
    out = Families()
    for capacity in snapshot.capacity:
        _add_capacity(out, capacity)
    for profile in snapshot.profiles:
        _add_profile(out, profile)
    for target, gpus in snapshot.gpus.items():
        out.add(names.TARGET_GPUS, (target,), gpus)
    for target, tokens in snapshot.contexts.items():
        out.add(names.TARGET_SERVED_CONTEXT, (target,), tokens)
    for target, module in snapshot.over_context:
        out.add(names.PROBE_OVER_CONTEXT, (target, module), 1.0)
    for (target, kind, state), count in snapshot.counts.finished.items():
        out.add(names.JOBS_FINISHED, (target, kind, state), count)
    for (target, kind), count in snapshot.counts.running.items():
        out.add(names.JOB_RUNNING, (target, kind), count)
    for store, failing in snapshot.unwritten.items():
        out.add(names.STATE_UNWRITTEN, (store,), 1.0 if failing else 0.0)
    return out


def _add_capacity(out: Families, result: CapacitySnapshot) -> None:
    labels = (result.target, result.module)
    # Only a measurement is exported as the capacity: a lower bound read as one would raise the
    # 7-day maximum of the regression alert, and trigger or clear it, on a number nobody measured. Nor
    # is a search whose ends rest on timings the client distrusts (the CLI exits 1 for it).
    outcome = result.state or ("found" if result.capacity is not None else "not_met")
    found = result.capacity is not None and outcome == "found" and not result.unreliable_timings
    out.add(names.CAPACITY_FOUND, labels, 1.0 if found else 0.0)
    out.add(names.CAPACITY_UNRELIABLE_TIMINGS, labels, 1.0 if result.unreliable_timings else 0.0)
    for state in CAPACITY_STATES:
        out.add(names.CAPACITY_STATE, (*labels, state), 1.0 if state == outcome else 0.0)
    if result.stopped_by in CAPACITY_STOPS:
        for reason in CAPACITY_STOPS:
            out.add(names.CAPACITY_STOPPED_BY, (*labels, reason), 1.0 if reason == result.stopped_by else 0.0)
    if found and result.capacity is not None:
        spec = names.CAPACITY_RATE if result.load_kind == "rate" else names.CAPACITY_CONCURRENCY
        out.add(spec, labels, result.capacity)
    for spec, bound in (
        (names.CAPACITY_LOWER_BOUND, result.lower_bound),
        (names.CAPACITY_UPPER_BOUND, result.upper_bound),
    ):
        if bound is not None:
            out.add(spec, labels, bound)
    for end, load in result.predicted.items():
        out.add(names.CAPACITY_PREDICTED_LOAD, (*labels, end), load)
    if result.prediction_error is not None:
        out.add(names.CAPACITY_PREDICTION_ERROR, labels, result.prediction_error)
    for at, point in result.costs.items():
        for spec, value in (
            (names.CAPACITY_FLUID_GOODPUT, point.fluid_goodput_tokens_per_s),
            (names.CAPACITY_TOKENS_PER_GPU_SECOND, point.tokens_per_gpu_second),
            (names.CAPACITY_TOKEN_COST, point.token_cost),
        ):
            if value is not None:
                out.add(spec, (*labels, at), value)
    for spec, value in (
        (names.CAPACITY_FLUID_RATE, result.fluid_token_rate),
        (names.CAPACITY_GOODPUT_RATIO, result.goodput_ratio),
        (names.CAPACITY_GOODPUT_RATE, result.goodput_rate),
    ):
        if value is not None:
            out.add(spec, labels, value)
    out.add(names.CAPACITY_TIMESTAMP, labels, result.finished_at)
    for trial in result.trials:
        _add_trial(out, labels, trial)


def _add_trial(out: Families, labels: tuple[str, str], trial: TrialPoint) -> None:
    trial_labels = (*labels, str(trial.index))
    out.add(names.CAPACITY_TRIAL_LOAD, trial_labels, trial.load)
    out.add(names.CAPACITY_TRIAL_PASSED, trial_labels, 1.0 if trial.passed else 0.0)
    if trial.headroom is not None:
        out.add(names.CAPACITY_TRIAL_HEADROOM, trial_labels, trial.headroom)


def _add_profile(out: Families, profile: ProfileSnapshot) -> None:
    for tokens in REFERENCE_PROMPT_TOKENS:
        predicted = profile.model.predict(float(tokens))
        out.add(names.PREFILL_PROFILE_PREDICTED, (profile.target, str(tokens)), predicted)
    out.add(names.PREFILL_PROFILE_TIMESTAMP, (profile.target,), profile.measured_at)
