"""Benchmark of the capacity search: accuracy, trials and tokens against a dense sweep and three peers.

Every trial runs on the virtual clock (``bench/virtual_engine.py``): the same engine code as the live
simulator (scheduler, cost model, KV cache), no sockets and no waiting, about 1 s of CPU per trial, so a
dense sweep of loads is affordable as ground truth. All three procedures call one trial function with
common random numbers (``plan_trial`` with a fixed seed: the same request lengths and unit-rate arrival
gaps at every load), so ``trial(load)`` is deterministic and the differences come from the search
procedures alone.

* Ground truth: a sweep without early stopping, doubling from 0.125 req/s to the first failure, then 10%
  steps across that doubling, then 1% steps from 5% below the highest coarse pass to the lowest coarse
  failure. The capacity is the highest passing load below the lowest failing one.
* Ours: ``exporter.jobs.capacity_loop.search_capacity`` as the daemon runs it: tolerance 5%, each trial's
  pass fraction judged by its 95% Clopper-Pearson interval (an inconclusive end of the final bracket is
  run again with new lengths and gaps where that alone could make it ``found``, at most 3 trials per
  load; a repeat at the lower end stops at the miss that makes its pass impossible), early stops only
  on a confident failure. Its answer is its lower bound whatever the state it reports (found, lower bound,
  inconclusive), so its error compares with the others'.
  Beside it, the engine model's last prediction and its error (``pred%``; ``exporter.jobs.capacity_model``).
* Modelled: the same search with its trials placed by the engine model's predicted knee
  (``SearchSettings.predict``): measured on the 48 runs (in two halves of 6 scenarios), the same tokens
  as ours in the median (100% in each half), 46 of 48 within 5% (ours 47) and 36 of 48 within 6 trials
  (ours 44), so it is off by default.
* Point: the same search on point verdicts (no intervals, no repeats), with the same confident early
  stops: what the honesty costs.
* Etalon: its capacity search as its code runs it (``CapacitySearch.search`` in
  ``etalon/capacity_search/capacity_search.py`` of project-etalon/etalon, commit 09d935e, with its
  defaults: ``--min-search-granularity 2.5``, ``--max-iterations 20``): the interval starts at ``[0, 2 x
  start]``, each trial runs at the midpoint rounded to two decimals; a pass raises the lower end and, when
  it lands above 0.8x of the upper end, doubles that end (never past the lowest failing load); a failure
  lowers the upper end. It stops before a trial once the interval is narrower than 2.5% of the *last load
  tried* (not of the upper end: after a pass that is the lower end, so the test is stricter), or when the
  rounded midpoint repeats the last load, and answers the last passing load. A load it tried before (at
  0.01 req/s steps, below about 0.4 req/s) is read back from that run's saved results, not run again.
  Its trials never stop early. (Before, the bench stopped at 2.5% of the upper end and did not round,
  from Etalon's description; the code's rule costs it a trial more in some runs.)

The SLO: 99% of requests reach fluidity 0.9 with ``Dp`` = the prefill model fitted on the preset's
isolated TTFT (its default engine, chunked) + 0.5 s of scheduling slack, and ``Dd`` of the tier (medium
50 ms, strict 25 ms). A preset's chunked and unchunked engines are judged by the same SLO, so their
capacities compare. Workloads are cut to the 8K context (prompts <= 7168, outputs <= 1024 tokens).

* GuideLLM's goodput search, as its documentation describes it: double the rate from the start while
  the SLO holds, then bisect until the bracket is within 10%; every trial in full; a trial whose 95%
  Wilson interval straddles the objective is flagged (the search still follows the point verdict).
* AIPerf's monotonic search, as its documentation describes it: an exponential (doubling) probe to the
  first failure, then bisection to 5%; a verdict needs two agreeing trials (a third, with new lengths
  and gaps, breaks a tie); every trial in full.

* Oracle: a bound, not a peer. It knows the sweep and runs the fewest trials that end a search from
  the start (the start, a pass at the truth, a failure within 5% above it, with ours' early stops):
  what a search that placed every trial perfectly would spend.

Goal per run: within +-5% of the truth in <= 6 trials, spending <= 50% of Etalon's tokens (tokens: every
prompt sent plus every output token received, warm-up included).

Usage: ``python bench/capacity_bench.py [--quick] [--scenario NAME ...] [--verbose] [--jobs N]``
(about 8 minutes on 2 cores; ``--quick``: two scenarios, about 2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import Pool

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity_loop import TrialAsk, search_capacity
from exporter.jobs.capacity_search import SearchSettings
from exporter.jobs.trial import TrialPlan, TrialShape, plan_trial
from exporter.jobs.trial_verdict import TrialReport, TrialSlo
from exporter.load.presets import preset as workload_preset
from exporter.sim.engine_presets import PRESETS, isolated_ttft
from exporter.stats.binomial import Verdict, classify_fraction
from exporter.stats.prefill import fit_prefill_model

# Run as ``python bench/capacity_bench.py``, this folder is on the path and its parent is not.
try:
    from bench.virtual_engine import engine_for, virtual_trial
except ModuleNotFoundError:
    from virtual_engine import engine_for, virtual_trial

WARMUP, REQUESTS, SEED = 20, 200, 0
SLACK_S = 0.5
TIERS = {"medium": 0.05, "strict": 0.025}  # Dd of Etalon's tiers, seconds
PROFILE_PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8128)
MAX_PROMPT, MAX_OUTPUT = 7168, 1024  # prompt + output within the presets' 8K context
MAX_LOAD = 1000.0  # req/s: far above every capacity here, so it never bounds our search
GOAL_ERROR, GOAL_TRIALS, GOAL_TOKENS = 0.05, 6, 0.5
# Etalon's capacity search, as in its capacity_search.py and main.py's defaults:
ETALON_VICINITY = 0.8  # VICINITY_THRESHOLD: a pass above this share of the top doubles it
ETALON_SCALE = 2  # QPS_INCREASE_SCALE
ETALON_GRANULARITY_PCT = 2.5  # --min-search-granularity, percent of the last load tried
ETALON_MAX_ITERATIONS = 20  # --max-iterations
ETALON_DECIMALS = 2  # round(qps, 2)
# Starts: 1 req/s and these multiples of the truth. Not powers of two: from truth/2 one doubling, and
# from 2x truth Etalon's second midpoint, lands exactly on the capacity, which flatters either method.
START_FACTORS = (0.3, 0.7, 2.5)
GUIDELLM_WIDTH = 0.10  # GuideLLM bisects until the bracket is within 10%
AIPERF_TOLERANCE = 0.05  # AIPerf's bisection stops at 5%, as ours
PEER_MAX_TRIALS = 30
REPEAT_SEED_STEP = 7919  # as exporter.jobs.capacity_runner: a repeat at one load draws new lengths and gaps
SWEEP_BASE, COARSE_STEP, FINE_STEP, FINE_BELOW, SWEEP_EXTENSIONS = 0.125, 1.10, 1.01, 0.95, 4


@dataclass(frozen=True)
class Scenario:
    """A model preset serving a workload, chunked prefill on or off, judged at one deadline tier."""

    preset: str
    workload: str
    chunked: bool
    tier: str = "medium"

    @property
    def name(self) -> str:
        return f"{self.preset}/{self.workload}/{'chunked' if self.chunked else 'whole'}/{self.tier}"


def _pair(preset: str, workload: str, tier: str = "medium") -> list[Scenario]:
    return [Scenario(preset, workload, chunked, tier) for chunked in (True, False)]


SCENARIOS = [
    *_pair("llama-3.1-8b-h100", "sharegpt"),
    *_pair("mistral-7b-a100", "arxiv-summarization"),
    *_pair("mistral-7b-a100", "sharegpt"),
    *_pair("llama-3.1-70b-4xh100", "arxiv-summarization"),
    *_pair("llama-3.1-8b-h100", "sharegpt", "strict"),
    *_pair("mistral-7b-a100", "arxiv-summarization", "strict"),
]
QUICK = SCENARIOS[:2]


class Bed:
    """One scenario's trial function: deterministic in (load, early stop), so results are cached."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.preset = PRESETS[scenario.preset]
        model = fit_prefill_model(PROFILE_PROMPTS, [isolated_ttft(self.preset, p) for p in PROFILE_PROMPTS])
        policy = DeadlinePolicy(prefill_model=model, scheduling_slack=SLACK_S)
        self.slo = TrialSlo(policy, TIERS[scenario.tier])
        workload = workload_preset(
            scenario.workload, max_prompt_tokens=MAX_PROMPT, max_output_tokens=MAX_OUTPUT
        )
        self.workload = workload
        self.units: dict[int, TrialPlan] = {}
        self.cache: dict[tuple[float, bool, int, tuple[int, int] | None], TrialReport] = {}
        self.simulated = 0
        self.swept: dict[float, bool] = {}  # the sweep's verdicts by load, once swept (for the oracle)

    def unit(self, part: int) -> TrialPlan:
        """The unit-rate plan of a load's ``part``-th trial: a repeat draws new lengths and gaps, as
        the runner's repeats do (the same ones would replay the same sample)."""
        if part not in self.units:
            # Prompt texts (the salt) never reach the virtual engine; lengths and gaps come from the seed.
            shape = TrialShape(
                concurrency=False, arrival="poisson", warmup=WARMUP, requests=REQUESTS,
                seed=SEED + REPEAT_SEED_STEP * part, salt=0,
            )  # fmt: skip
            self.units[part] = plan_trial(self.workload, 1.0, shape)
        return self.units[part]

    def plan(
        self, load: float, early_stop: bool, part: int = 0, settle: tuple[int, int] | None = None
    ) -> TrialPlan:
        unit = self.unit(part)
        assert unit.offsets is not None
        return dataclasses.replace(
            unit, load=load, offsets=unit.offsets / load, early_stop=early_stop, settle=settle
        )

    def trial(
        self, load: float, early_stop: bool, part: int = 0, settle: tuple[int, int] | None = None
    ) -> TrialReport:
        key = (load, early_stop, part, settle)
        if key not in self.cache:
            engine = engine_for(self.preset, chunked_prefill=self.scenario.chunked)
            self.cache[key] = virtual_trial(0, self.plan(load, early_stop, part, settle), self.slo, engine)
            self.simulated += 1
        return self.cache[key]


@dataclass
class Run:
    """One search from one start: its answer, every trial it paid for, and what it said it found."""

    capacity: float | None
    trials: list[TrialReport]
    state: str = "found"
    predicted: float | None = None  # the engine model's last prediction (ours only)

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.trials)

    def error(self, truth: float) -> float:
        return math.nan if self.capacity is None else self.capacity / truth - 1.0


@dataclass
class Outcome:
    """A scenario's results: truth, and per start every procedure's run (``PROCEDURES`` order)."""

    scenario: Scenario
    truth: float
    sweep: dict[float, bool]
    runs: list[tuple[float, dict[str, Run]]] = field(default_factory=list)
    simulated: int = 0
    cpu_s: float = 0.0


def sweep(bed: Bed) -> tuple[float, dict[float, bool]]:
    """The ground truth: the highest passing load below the lowest failing one over a dense sweep."""
    seen: dict[float, bool] = {}

    def passes(load: float) -> bool:
        seen[load] = bed.trial(load, early_stop=False).passed
        return seen[load]

    low = SWEEP_BASE
    while not passes(low) and low > 1e-3:
        low /= 2.0
    high = low * 2.0
    while passes(high):
        low, high = high, high * 2.0
    _grid(passes, low, high, COARSE_STEP)
    low, high = _knee(seen)
    bottom = low * FINE_BELOW
    _grid(passes, bottom, high, FINE_STEP)
    for _ in range(SWEEP_EXTENSIONS):  # a failure near the bottom of the fine grid: look further down
        if _knee(seen)[1] > bottom * FINE_STEP**2:
            break
        _grid(passes, bottom * FINE_BELOW, bottom, FINE_STEP)
        bottom *= FINE_BELOW
    return _knee(seen)[0], seen


def _grid(passes: Callable[[float], bool], low: float, high: float, step: float) -> None:
    load = low
    while load < high * 0.9999:
        passes(load)
        load *= step


def _knee(seen: dict[float, bool]) -> tuple[float, float]:
    """(highest pass below the lowest failure, lowest failure)."""
    failing = min((load for load, ok in seen.items() if not ok), default=math.inf)
    passing = max((load for load, ok in seen.items() if ok and load < failing), default=0.0)
    return passing, failing


def ours(bed: Bed, start: float, predict: bool = False) -> Run:
    """Our search as the daemon runs it: pass-fraction intervals at 95% (an inconclusive end is run
    again, with new lengths and gaps), confident early stops; its engine model's prediction
    (``exporter.jobs.capacity_model``) reported beside it, and with ``predict`` placing its trials."""
    parts: dict[float, int] = {}

    async def run_trial(ask: TrialAsk) -> TrialReport:
        load, may_stop, settle = ask.load, ask.may_stop, ask.settle
        part = parts.get(load, 0)
        parts[load] = part + 1
        return bed.trial(load, may_stop, part, settle)

    settings = SearchSettings(start=start, max_load=MAX_LOAD, required=bed.slo.required, predict=predict)
    result = asyncio.run(search_capacity(settings, run_trial))
    predicted = result.prediction["load"] if result.prediction else None
    return Run(result.lower_bound, result.trials, str(result.state), predicted)


def ours_modelled(bed: Bed, start: float) -> Run:
    """Our search with its trials placed by the engine model's predicted knee: the A/B."""
    return ours(bed, start, predict=True)


def etalon(bed: Bed, start: float) -> Run:
    """Etalon's capacity search, step for step as ``CapacitySearch.search`` runs it (module docstring).
    A load it tried before is not run again: Etalon keeps each run's results in a folder named after
    its load and reads them back (``is_under_sla``)."""
    left, right, qps, last_qps = 0.0, 2.0 * start, 0.0, 0.0
    lowest_failure = math.inf
    trials: list[TrialReport] = []
    verdicts: dict[float, bool] = {}
    best: float | None = None
    for _ in range(ETALON_MAX_ITERATIONS):
        if abs(left - right) < ETALON_GRANULARITY_PCT * qps / 100.0:
            break
        qps = round((left + right) / 2.0, ETALON_DECIMALS)
        if qps == last_qps:
            break
        last_qps = qps
        if qps not in verdicts:
            trials.append(bed.trial(qps, early_stop=False))
            verdicts[qps] = trials[-1].passed
        if verdicts[qps]:
            best = qps
            if qps > ETALON_VICINITY * right:
                right = min(right * ETALON_SCALE, lowest_failure)
            left = qps
        else:
            right = qps
            lowest_failure = min(lowest_failure, qps)
    return Run(best, trials)


def guidellm(bed: Bed, start: float) -> Run:
    """GuideLLM's goodput search: double the rate from the start while the SLO holds, then bisect the
    bracket until it is within 10% (of its top); answer the highest passing rate. Every trial runs in
    full; a trial whose Wilson interval straddles the objective is flagged inconclusive, and the
    search still follows its point verdict."""
    trials: list[TrialReport] = []
    lo, hi, rate = 0.0, math.inf, start
    while math.isinf(hi) and len(trials) < PEER_MAX_TRIALS:
        trial = bed.trial(rate, early_stop=False)
        trials.append(trial)
        if trial.passed:
            lo, rate = rate, rate * 2.0
        else:
            hi = rate
    if lo == 0.0:  # the start failed: bisect down from it
        lo = 0.0
    while hi - lo > GUIDELLM_WIDTH * hi and len(trials) < PEER_MAX_TRIALS:
        middle = (lo + hi) / 2.0
        trial = bed.trial(middle, early_stop=False)
        trials.append(trial)
        lo, hi = (middle, hi) if trial.passed else (lo, middle)
    return Run(lo or None, trials, _flagged(bed, trials))


def aiperf(bed: Bed, start: float) -> Run:
    """AIPerf's monotonic search: an exponential probe (doubling) from the start to the first failing
    load, then bisection to the tolerance; a verdict needs two trials that agree (a third, with new
    lengths and gaps, breaks a tie)."""
    trials: list[TrialReport] = []

    def verdict(load: float) -> bool:
        votes: list[bool] = []
        for part in range(3):
            trial = bed.trial(load, False, part)
            trials.append(trial)
            votes.append(trial.passed)
            if votes.count(True) >= 2 or votes.count(False) >= 2:
                break
        return votes.count(True) >= 2

    lo, hi, rate = 0.0, math.inf, start
    while math.isinf(hi) and len(trials) < PEER_MAX_TRIALS:
        if verdict(rate):
            lo, rate = rate, rate * 2.0
        else:
            hi = rate
    while hi - lo > AIPERF_TOLERANCE * hi and len(trials) < PEER_MAX_TRIALS:
        middle = (lo + hi) / 2.0
        lo, hi = (middle, hi) if verdict(middle) else (lo, middle)
    return Run(lo or None, trials)


def _flagged(bed: Bed, trials: list[TrialReport]) -> str:
    """ "inconclusive" when a trial's 95% Wilson interval straddles the objective, as GuideLLM flags it."""
    for trial in trials:
        counts = trial.counts()
        if counts and classify_fraction(*counts, bed.slo.required, method="wilson") is Verdict.INCONCLUSIVE:
            return "flagged"
    return "found"


def ours_point(bed: Bed, start: float) -> Run:
    """Our search on point verdicts (no intervals, no repeats), with the same confident early stops:
    what honesty about the sample costs, measured beside it."""

    async def run_trial(ask: TrialAsk) -> TrialReport:
        return bed.trial(ask.load, ask.may_stop)

    result = asyncio.run(search_capacity(SearchSettings(start=start, max_load=MAX_LOAD), run_trial))
    return Run(result.lower_bound, result.trials, str(result.state))


def oracle(bed: Bed, start: float) -> Run:
    """A search that knows the sweep (``bed.swept``): from the start, the fewest trials that end with a
    pass and a failure within the tolerance, with ours' confident early stops: the start, a pass at the
    truth and a failure at the highest load the sweep saw fail within the tolerance above it (the
    likeliest to stop early), either left out where the start is that end already. Every pass costs
    the same (common random numbers), so no search that starts where ours does and runs trials of this
    size spends much less: its ratio to Etalon's is about the least ours could reach."""
    truth, lowest_failure = _knee(bed.swept)
    tolerance = SearchSettings(start=start, max_load=MAX_LOAD).tolerance
    first = bed.trial(start, early_stop=True)
    trials = [first]
    low = start if first.passed and truth <= start < lowest_failure else truth
    if low != start:
        trials.append(bed.trial(truth, early_stop=True))
    top = low * (1.0 + tolerance)
    if first.passed or not low < start <= top:
        # the likeliest to stop early; the lowest failure when the sweep saw none within the tolerance
        within = [load for load, ok in bed.swept.items() if not ok and low < load <= top]
        failing = max(within, default=lowest_failure)
        trials.append(bed.trial(failing, early_stop=True))
    return Run(low, trials)


PROCEDURES: dict[str, Callable[[Bed, float], Run]] = {
    "ours": ours, "modelled": ours_modelled, "point": ours_point, "etalon": etalon, "guidellm": guidellm, "aiperf": aiperf,
    "oracle": oracle,
}  # fmt: skip


def starts(truth: float) -> list[float]:
    return [1.0, *(truth * factor for factor in START_FACTORS)]


def measure(scenario: Scenario) -> Outcome:
    began = time.process_time()
    bed = Bed(scenario)
    truth, seen = sweep(bed)
    bed.swept = seen
    outcome = Outcome(scenario, truth, seen)
    for start in starts(truth):
        outcome.runs.append((start, {name: search(bed, start) for name, search in PROCEDURES.items()}))
    outcome.simulated, outcome.cpu_s = bed.simulated, time.process_time() - began
    return outcome


def met(run: Run, reference: Run, truth: float) -> bool:
    error = run.error(truth)
    return (
        abs(error) <= GOAL_ERROR
        and len(run.trials) <= GOAL_TRIALS
        and run.tokens <= GOAL_TOKENS * reference.tokens
    )


def report(outcome: Outcome, verbose: bool) -> None:
    s, truth = outcome.scenario, outcome.truth
    knee = sorted(outcome.sweep)
    print(
        f"\n{s.name}: Dd {TIERS[s.tier] * 1e3:.0f} ms; truth {truth:.4g} req/s "
        f"({len(knee)} sweep trials; {outcome.simulated} simulated, {outcome.cpu_s:.0f} s CPU)"
    )
    header = " | ".join(f"{name:>8} {'err%':>6} {'trials':>6} {'Mtok':>6}" for name in PROCEDURES)
    print(f"  {'start':>7} | {header} | {'ours/et':>7} | {'pred%':>6} | goal")
    for start, runs in outcome.runs:
        cells = " | ".join(
            f"{_cap(run)} {run.error(truth) * 100:+6.1f} {len(run.trials):6d} {run.tokens / 1e6:6.2f}"
            for run in runs.values()
        )
        mine, theirs = runs["ours"], runs["etalon"]
        predicted = f"{(mine.predicted / truth - 1) * 100:+6.1f}" if mine.predicted else f"{'none':>6}"
        print(
            f"  {start:7.3g} | {cells} | {mine.tokens / theirs.tokens:7.0%} | {predicted} | "
            f"{'yes' if met(mine, theirs, truth) else 'no'} ({mine.state})"
        )
        if verbose:
            for name, run in runs.items():
                print(f"      {name:>8}: {_sequence(run)}")
    if verbose:
        trail = " ".join(f"{load:.4g}{'+' if ok else '-'}" for load, ok in sorted(outcome.sweep.items()))
        print(f"      sweep: {trail}")


def _cap(run: Run) -> str:
    return f"{run.capacity:8.4g}" if run.capacity is not None else f"{'none':>8}"


def _sequence(run: Run) -> str:
    return " ".join(
        f"{t.load:.4g}{'+' if t.passed else '-'}{'?' if t.verdict == 'inconclusive' else ''}"
        f"(h{t.headroom:.3f}{' early' if t.stopped_early else ''} {t.tokens / 1e3:.0f}k)"
        for t in run.trials
    )


def summary(outcomes: list[Outcome]) -> None:
    runs = [(o.truth, found) for o in outcomes for _, found in o.runs]
    print(f"\nsummary over {len(runs)} runs in {len(outcomes)} scenarios:")
    print(
        f"  {'':>8} {'within 5%':>9} {'<= 6 trials':>11} {'|err| mean':>10} {'max':>6} {'trials':>6} {'max':>4} {'Mtok':>6}"
    )
    for name in PROCEDURES:
        errors = [abs(found[name].error(truth)) for truth, found in runs]
        trials = [len(found[name].trials) for _, found in runs]
        tokens = sum(found[name].tokens for _, found in runs) / len(runs)
        print(
            f"  {name:>8} {sum(e <= GOAL_ERROR for e in errors):>6}/{len(runs)} "
            f"{sum(n <= GOAL_TRIALS for n in trials):>8}/{len(runs)} {statistics.mean(errors):>10.1%} "
            f"{max(errors):>6.1%} {statistics.mean(trials):>6.1f} {max(trials):>4} {tokens / 1e6:>6.2f}"
        )
    peers = ("modelled", "point", "etalon", "guidellm", "aiperf")
    comparisons = [*(("ours", peer) for peer in peers), ("modelled", "etalon"), ("oracle", "etalon")]
    for mine, peer in comparisons:
        ratios = [found[mine].tokens / found[peer].tokens for _, found in runs]
        print(
            f"  tokens {mine}/{peer}: median {statistics.median(ratios):.0%}, "
            f"<= 50% in {sum(r <= GOAL_TOKENS for r in ratios)}/{len(runs)} runs, worst {max(ratios):.0%}"
        )
    for name in ("ours", "modelled"):
        states = [found[name].state for _, found in runs]
        print(
            f"  {name} said: {', '.join(f'{state} {states.count(state)}' for state in sorted(set(states)))}"
        )
    predicted = [abs(found["ours"].predicted / truth - 1) for truth, found in runs if found["ours"].predicted]
    if predicted:
        print(
            f"  the engine model's last prediction: |err| median {statistics.median(predicted):.1%}, "
            f"within 5% in {sum(e <= GOAL_ERROR for e in predicted)}/{len(runs)}, worst {max(predicted):.1%}; "
            f"trials ours median {statistics.median(len(f['ours'].trials) for _, f in runs)}, "
            f"modelled {statistics.median(len(f['modelled'].trials) for _, f in runs)}"
        )
    states = [found["ours"].state for _, found in runs]
    goal = sum(met(found["ours"], found["etalon"], truth) for truth, found in runs)
    print(
        f"  ours said: {', '.join(f'{state} {states.count(state)}' for state in sorted(set(states)))}; "
        f"goal (+-5%, <= 6 trials, <= 50% of Etalon's tokens) met in {goal}/{len(runs)}"
    )
    pairs: dict[tuple[str, str, str], dict[bool, float]] = {}
    for o in outcomes:
        pairs.setdefault((o.scenario.preset, o.scenario.workload, o.scenario.tier), {})[
            o.scenario.chunked
        ] = o.truth
    for (model, workload, tier), truths in pairs.items():
        if len(truths) == 2:
            print(
                f"  chunked vs whole-prompt prefill, {model}/{workload}/{tier}: "
                f"{truths[True]:.4g} vs {truths[False]:.4g} req/s ({truths[True] / truths[False] - 1:+.1%})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two scenarios: a smoke run")
    parser.add_argument("--scenario", action="append", help="run only scenarios whose name contains this")
    parser.add_argument(
        "--verbose", action="store_true", help="print every trial sequence (load, verdict, headroom, tokens)"
    )
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    chosen = QUICK if args.quick else SCENARIOS
    if args.scenario:
        chosen = [s for s in SCENARIOS if any(part in s.name for part in args.scenario)]
        if not chosen:
            sys.exit(f"no scenario matches {args.scenario}; valid: {', '.join(s.name for s in SCENARIOS)}")
    print(
        f"capacity search on the virtual clock (same engine code as the live simulator, no sockets); "
        f"{WARMUP} warm-up + {REQUESTS} measured requests per trial, common random numbers (seed {SEED}); "
        f"{len(chosen)} scenarios on {args.jobs} processes"
    )
    began = time.perf_counter()
    outcomes = []
    with Pool(max(1, min(args.jobs, len(chosen)))) as pool:
        for outcome in pool.imap(measure, chosen):
            report(outcome, args.verbose)
            outcomes.append(outcome)
    summary(outcomes)
    print(f"  wall time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
