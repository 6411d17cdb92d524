"""A capacity search ends, and says what it found: the floor, the time budget, trial time limits, the
four states, pass-fraction intervals with repeats where the search ends, confident early stops, the
drained-engine wait and progress by requests."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest

from exporter.evaluation import DeadlinePolicy
from exporter.jobs import capacity_runner
from exporter.jobs.capacity_loop import (
    FIRST_TRIAL,
    MAX_SET_ASIDE,
    DrainTimes,
    SearchHooks,
    TrialAsk,
    search_capacity,
    wait_drained,
)
from exporter.jobs.capacity_report import SearchProgress, capacity_table, figure, result_line
from exporter.jobs.capacity_result import CapacityResult, stop_kind
from exporter.jobs.capacity_runner import SearchTarget, default_floor, search_settings, trial_time_limit
from exporter.jobs.capacity_search import (
    Observation,
    SearchSettings,
    State,
    could_settle,
    next_load,
    outcome,
    pool,
    settling,
    verdict,
)
from exporter.jobs.trial import Tally, TrialPlan, TrialShape, stop_reason
from exporter.jobs.trial_verdict import TrialCost, TrialReport, TrialSlo, judge
from exporter.load.workloads import IndependentLengths, PlanStoppedError, Workload
from exporter.probe.client import ProbeClient
from exporter.settings.job_params import CapacityParams, JobLimits
from exporter.settings.lengths import Fixed
from exporter.settings.target import TargetSettings
from exporter.stats.binomial import Verdict, classify_fraction, fewest_to_confirm
from exporter.stats.headroom import decided_failure
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult

P99 = 0.99
SLO = TrialSlo(DeadlinePolicy(prefill_deadline=1.0), decode_deadline=0.05)


def counted(load: float, fluid: int, total: int, headroom: float = 1.0) -> TrialReport:
    """A trial that ``fluid`` of ``total`` requests passed, its point verdict by the p99 rule."""
    passed = fluid >= math.ceil(P99 * total)
    figures = {"requests": total, "fluid_requests": fluid, "objectives": [], "goodput": {"met": None}}
    return TrialReport(0, load, passed, "pass" if passed else "slo", headroom, figures, total, 100.0, 1000)


async def run(
    settings: SearchSettings, trial: object, *, time_budget_s: float | None = None, drain: object = None
) -> object:
    timed = dataclasses.replace(settings, time_budget_s=time_budget_s)
    return await search_capacity(timed, trial, SearchHooks(drain=drain))  # type: ignore[arg-type]


# -- bounded ------------------------------------------------------------------------------------------


async def test_a_target_failing_at_every_load_ends_at_the_floor_not_met() -> None:
    """The CI search that descended to 0.0625 req/s: with a floor it ends there, "not met"."""
    settings = SearchSettings(start=16.0, max_load=20.0, max_trials=30, floor=0.25)
    loads: list[float] = []

    async def trial(ask: TrialAsk) -> TrialReport:
        load = ask.load
        loads.append(load)
        return counted(load, 0, 120, headroom=0.1)

    result = await run(settings, trial)
    assert result.state is State.NOT_MET and result.stopped_by == "floor"  # type: ignore[attr-defined]
    assert result.capacity is None and result.lower_bound is None  # type: ignore[attr-defined]
    assert loads[-1] == 0.25 and min(loads) == 0.25 and len(loads) < 30


@pytest.mark.parametrize("flagged", [0, 1, 3])
async def test_an_answer_on_timings_the_client_distrusts_says_so(flagged: int) -> None:
    """``bench`` fails a run with more than 1% of its requests flagged unreliable by the client; a
    capacity search whose answer rests on such a trial (at either end) says so, and names it."""
    settings = SearchSettings(start=4.0, max_load=100.0, max_trials=12, floor=0.25)

    async def trial(ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        report = counted(load, 200 if load <= 10.0 else 150, 200, headroom=10.0 / load)
        report.index = index
        report.figures["unreliable"] = flagged if 9.0 <= load <= 11.0 else 0
        return report

    result = await run(settings, trial)
    assert result.lower_bound is not None and 9.0 <= result.lower_bound <= 10.0  # type: ignore[attr-defined]
    shaky = result.unreliable_timings()  # type: ignore[attr-defined]
    if flagged <= 0.01 * 200:
        assert shaky is None
    else:
        assert shaky is not None and f"{flagged} of 200 requests" in shaky and "at most 1% may be" in shaky
        assert result.to_dict()["unreliable_timings"] == shaky  # type: ignore[attr-defined]


def shaky_at(loads: set[float] | None, times: int) -> object:
    """A trial at capacity 10: the first ``times`` trials at each load of ``loads`` (None: every load)
    have 63 of their 200 requests flagged unreliable (one stall of the client's machine, every stream
    in flight), the rest none."""
    seen: dict[float, int] = {}

    async def trial(ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        report = counted(load, 200 if load <= 10.0 else 150, 200, headroom=10.0 / load)
        report.index = index
        seen[load] = seen.get(load, 0) + 1
        shaky = loads is None or load in loads
        report.figures["unreliable"] = 63 if shaky and seen[load] <= times else 0
        return report

    return trial


async def test_a_trial_on_distrusted_timings_is_set_aside_and_its_load_run_again() -> None:
    """The default search on a quiet 2-core VM ended on such a trial in 1 of 3 runs (exit 1): its load
    runs again on a new sample, and the search steers on, and answers from, the trusted rerun."""
    settings = SearchSettings(start=4.0, max_load=100.0, max_trials=12, floor=0.25)
    clean = await run(settings, shaky_at(set(), 0))
    loads = [t.load for t in clean.trials]  # type: ignore[attr-defined]
    result = await run(settings, shaky_at({loads[1]}, 1))
    assert [t.load for t in result.trials] == [loads[0], loads[1], *loads[1:]]  # type: ignore[attr-defined]
    aside = result.trials[1]  # type: ignore[attr-defined]
    assert aside.set_aside == (
        f"63 of 200 requests timed unreliably by the client (at most 1% may be): run again at "
        f"{loads[1]:g} req/s on a new sample"
    )
    assert aside.to_dict()["set_aside"] == aside.set_aside
    assert result.unreliable_timings() is None and result.state is clean.state  # type: ignore[attr-defined]
    assert (result.lower_bound, result.upper_bound) == (clean.lower_bound, clean.upper_bound)  # type: ignore[attr-defined]
    assert result.judged == result.trials[:1] + result.trials[2:]  # type: ignore[attr-defined]
    table = capacity_table(result)  # type: ignore[arg-type]
    assert f"trial 2 set aside: {aside.set_aside}" in table
    assert f"{len(loads) + 1} trials (1 set aside)" in table


async def test_a_load_distrusted_twice_is_believed_and_said_unreliable() -> None:
    settings = SearchSettings(start=4.0, max_load=100.0, max_trials=12, floor=0.25)
    clean = await run(settings, shaky_at(set(), 0))
    low = clean.lower_bound  # type: ignore[attr-defined]
    result = await run(settings, shaky_at({low}, 2))
    at_low = [t for t in result.trials if t.load == low]  # type: ignore[attr-defined]
    assert [t.set_aside is not None for t in at_low] == [True, False]
    assert result.lower_bound == low  # type: ignore[attr-defined]
    assert f"trial {at_low[1].index} at {low:g} req/s: 63 of 200" in result.unreliable_timings()  # type: ignore[attr-defined]


async def test_a_distrusted_trial_far_from_the_objective_steers_as_it_is() -> None:
    """Far below the capacity (headroom 2.5) its headroom steers the search all the same, and a rerun
    would cost a whole trial (46 s of the default search): it is kept."""
    settings = SearchSettings(start=4.0, max_load=100.0, max_trials=12, floor=0.25)
    clean = await run(settings, shaky_at(set(), 0))
    result = await run(settings, shaky_at({4.0}, 1))
    assert result.trials[0].headroom == 2.5 and result.trials[0].set_aside is None  # type: ignore[attr-defined]
    assert [t.load for t in result.trials] == [t.load for t in clean.trials]  # type: ignore[attr-defined]


async def test_the_rerun_of_a_set_aside_first_failure_runs_in_full() -> None:
    """The first failure runs in full, its headroom the interpolation's anchor: a failure set aside
    anchors nothing, so its rerun is that first failure and may not stop early either."""
    settings = SearchSettings(start=10.4, max_load=100.0, max_trials=4, floor=0.25)
    may_stop: list[bool] = []
    shaky = shaky_at({10.4}, 1)

    async def trial(ask: TrialAsk) -> TrialReport:
        stop = ask.may_stop
        may_stop.append(stop)
        return await shaky(ask)  # type: ignore[operator, no-any-return]

    result = await run(settings, trial)
    assert [t.set_aside is not None for t in result.trials][:2] == [True, False]  # type: ignore[attr-defined]
    assert not result.trials[1].passed and may_stop[:3] == [False, False, True]  # type: ignore[attr-defined]


@pytest.mark.parametrize("max_trials", [1, 3, 8])
async def test_setting_trials_aside_is_bounded_and_counts_among_max_trials(max_trials: int) -> None:
    """A client that distrusts every trial (saturated, or a bursty gateway) gets at most
    ``MAX_SET_ASIDE`` reruns, never more trials than ``max_trials``."""
    settings = SearchSettings(start=9.0, max_load=100.0, max_trials=max_trials, floor=0.25)
    everything = await run(settings, shaky_at(None, 99))
    trials = everything.trials  # type: ignore[attr-defined]
    aside = [t.set_aside is not None for t in trials]
    assert len(trials) <= max_trials and not aside[-1]  # never the last trial allowed: none would rerun it
    assert min(1, max_trials - 1) <= sum(aside) <= min(MAX_SET_ASIDE, max_trials - 1)
    for index, set_aside in enumerate(aside):
        if set_aside:  # run again at once, and that rerun believed
            assert trials[index + 1].load == trials[index].load and not aside[index + 1]


def test_a_found_capacity_on_distrusted_timings_is_not_stated_as_a_measurement() -> None:
    """The daemon exports no capacity for it, so the CLI's answer and its cost line do not call the
    lower end "capacity" either (capacity.json keeps state and capacity, with unreliable_timings)."""
    low, high = counted(8.0, 200, 200, headroom=1.02), counted(8.4, 180, 200, headroom=0.9)
    low.index, high.index = 1, 2
    low.figures.update(unreliable=5, fluid_goodput_tokens_per_s=300.0)
    result = CapacityResult("rate", State.FOUND, 8.0, 8.4, True, "converged", [low, high])
    assert result.capacity == 8.0 and result.unreliable_timings() is not None
    assert result_line(result) == (
        "capacity 8 req/s (fails at 8.4) on timings the client distrusts: not a measurement "
        "(unreliable_timings); converged"
    )
    table = capacity_table(result)
    assert "at the lower bound (8): fluid goodput 300 tokens/s" in table and "at capacity" not in table
    trusted = dataclasses.replace(
        result, trials=[dataclasses.replace(low, figures={**low.figures, "unreliable": 0}), high]
    )
    assert result_line(trusted) == "capacity 8 req/s (fails at 8.4); converged"
    assert "at capacity (8): fluid goodput 300 tokens/s" in capacity_table(trusted)


def test_the_answer_line_names_the_failure_above_a_lower_bound_and_the_floor_of_a_not_met() -> None:
    """A lower bound stopped before its bracket closed hid the failure above it, and
    a not_met at the floor (a capacity of 0 to the alert) read like one stopped by a budget."""
    low, high = counted(26.37, 200, 200, headroom=1.3), counted(69.41, 150, 200, headroom=0.5)
    low.index, high.index = 1, 2
    low.figures.update(unreliable=0)
    high.figures.update(unreliable=0)
    open_bracket = CapacityResult("rate", State.LOWER_BOUND, 26.37, 69.41, True, "max_trials", [low, high])
    assert result_line(open_bracket) == (
        "capacity at least 26.37 req/s; fails at 69.41 req/s, not within the tolerance (stopped by max_trials)"
    )
    ceiling = CapacityResult("rate", State.LOWER_BOUND, 26.37, None, False, "max_load", [low])
    assert result_line(ceiling) == "capacity at least 26.37 req/s (stopped by max_load)"
    floor = CapacityResult("rate", State.NOT_MET, None, 0.25, False, "floor", [high])
    assert (
        result_line(floor) == "capacity none: the SLO is not met at any load we can offer (stopped by floor)"
    )
    budget = dataclasses.replace(floor, stopped_by="time_budget")
    assert (
        result_line(budget) == "capacity none: the SLO is not met at any load tried (stopped by time_budget)"
    )


def test_an_inconclusive_answer_says_what_each_end_saw_and_what_to_do() -> None:
    """The default search at p99 ends inconclusive nearly always: a newcomer is told why (what each
    end saw, how many fluid requests a pass takes) and what to do, not only that an end straddles."""
    low, high = counted(10.27, 200, 200, headroom=1.05), counted(10.78, 195, 200, headroom=0.99)
    low.index, high.index = 1, 2
    intervals = {
        "lower_bound": {"successes": 200, "requests": 200, "verdict": "inconclusive"},
        "upper_bound": {"successes": 195, "requests": 200, "verdict": "inconclusive"},
    }
    result = CapacityResult(
        "rate", State.INCONCLUSIVE, 10.27, 10.78, True, "converged", [low, high], intervals=intervals,
        slo={"percentile": 99.0, "confidence": 0.95},
    )  # fmt: skip
    needed = fewest_to_confirm(0.99, 0.95)
    assert result_line(result) == (
        "capacity inconclusive: between 10.27 and 10.78 req/s, an end straddles the objective: 200 of 200 "
        "fluid at 10.27 (inconclusive), 195 of 200 fluid at 10.78 (inconclusive). A pass at p99 takes "
        f"{needed} fluid requests in a row at 0.95 confidence. Plan below 10.27, or for an answer the "
        "trials can vouch for send more requests per trial or judge a lower percentile"
    )
    assert needed == 368


def test_an_answer_says_it_holds_for_bursts_as_long_as_its_trial() -> None:
    """On the simulator a rate that passed trials of 200 requests failed trials of 400: the queue of
    an engine near its knee builds slowly, so the answer says how long the trial it rests on was."""
    low, high = counted(10.27, 200, 200, headroom=1.05), counted(10.78, 195, 200, headroom=0.99)
    low.index, high.index, low.planned, high.planned = 1, 2, 200, 200
    result = CapacityResult("rate", State.INCONCLUSIVE, 10.27, 10.78, True, "converged", [low, high])
    assert (
        "holds for bursts like its trials: 200 requests in 100 s at 10.27; a load kept up for hours can "
        "queue below it (leave headroom, or search with longer trials)"
    ) in capacity_table(result).splitlines()
    none_passed = CapacityResult("rate", State.NOT_MET, None, 10.78, False, "floor", [high])
    assert "holds for bursts" not in capacity_table(none_passed)


def test_large_loads_and_rates_are_printed_without_an_exponent() -> None:
    """A concurrency of 10240 was printed as 1.024e+04, and 12,346 tokens/s as 1.235e+04."""
    low, high = counted(10240.0, 200, 200, headroom=1.02), counted(10700.0, 180, 200, headroom=0.9)
    low.index, high.index = 1, 2
    low.figures.update(unreliable=0, fluid_goodput_tokens_per_s=12345.6)
    result = CapacityResult("concurrency", State.FOUND, 10240.0, 10700.0, True, "converged", [low, high])
    assert result_line(result) == "capacity 10240 concurrent (fails at 10700); converged"
    table = capacity_table(result)
    assert "at capacity (10240): fluid goodput 12346 tokens/s" in table
    assert "e+0" not in table
    assert [figure(v) for v in (9999.4, 9999.6, 0.7124, 1.234e-05, None)] == [
        "9999",
        "10000",
        "0.7124",
        "0.00001234",
        "-",
    ]


def test_the_default_floor_is_a_trial_of_fifteen_minutes() -> None:
    params = CapacityParams(target="t", start=16.0, requests_per_trial=100, warmup_requests=20)
    assert default_floor(params) == pytest.approx(120 / 900)
    settings = search_settings(params, JobLimits())
    assert settings.min_load == pytest.approx(120 / 900)
    assert search_settings(CapacityParams(target="t", start=0.05), JobLimits()).min_load == 0.05  # <= start
    assert default_floor(CapacityParams(target="t", load="concurrency")) == 1.0


def test_min_load_raises_the_default_start_and_a_concurrency_stays_within_its_trial() -> None:
    """The floor is where the search starts when no start is given (it started at 1 req/s below a
    floor of 20); a concurrency search never goes above what its trial's requests hold as a closed loop
    (it tried 494 in flight with 220 requests a trial, all sent at once)."""
    settings = search_settings(CapacityParams(target="a", min_load=20.0), JobLimits(max_rate=100.0))
    assert settings.start == 20.0 and settings.min_load == 20.0
    closed = CapacityParams(target="a", load="concurrency", requests_per_trial=200, warmup_requests=20)
    assert search_settings(closed, JobLimits(max_concurrency=1000)).max_load == 110.0


async def test_a_trial_that_measured_nothing_ends_the_search_with_no_state() -> None:
    """A trial whose duration ended in its warm-up measured nothing: it is no failure of the target
    (counted as one, it steered the search to the floor and reported "not met", exit 0)."""
    loads: list[float] = []

    async def trial(ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        loads.append(load)
        if index == 1:
            return counted(load, 200, 200, headroom=3.0)
        report = TrialReport.of(index, load, judge([], SLO), TrialCost(12, 15.0, 800))
        report.ended_by = "duration"
        return report

    result = await run(SearchSettings(start=2.0, max_load=100.0), trial)
    assert loads == [2.0, 6.0]  # no third trial: the next would fare no better
    assert result.stopped_by == (  # type: ignore[attr-defined]
        "no_data: trial 2 at 6 req/s measured no request (12 sent, ended by duration, after 15.0 s): "
        "raise the trial duration or lower the warm-up"
    )
    # What the first trial showed still stands; with nothing measured at all there is no state.
    assert result.state is State.LOWER_BOUND and result.lower_bound == 2.0  # type: ignore[attr-defined]

    async def nothing(ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        return TrialReport.of(index, load, judge([], SLO), TrialCost(0, 15.0, 0))

    empty = await run(SearchSettings(start=2.0, max_load=100.0), nothing)
    assert empty.state is None and empty.to_dict()["state"] is None  # type: ignore[attr-defined]
    assert "no capacity: no trial's result could be judged" in result_line(empty)  # type: ignore[arg-type]
    row = capacity_table(empty).splitlines()[1]  # type: ignore[arg-type]
    assert "no data" in row and "fail" not in row and "nan" not in row  # no failure of the target


async def test_the_time_budget_ends_a_search_and_bounds_each_trial() -> None:
    settings = SearchSettings(start=1.0, max_load=1000.0, max_trials=20)
    given: list[float | None] = []

    async def trial(ask: TrialAsk) -> TrialReport:
        load, time_left = ask.load, ask.time_left_s
        given.append(time_left)
        return counted(load, 200, 200, headroom=50.0)  # passes everywhere: only the budget ends it

    result = await run(settings, trial, time_budget_s=350.0)
    assert result.stopped_by == "time_budget" and result.state is State.LOWER_BOUND  # type: ignore[attr-defined]
    assert given == [350.0, 250.0, 150.0, 50.0]  # each trial told what is left; none starts with < 10 s
    assert result.capacity is None  # type: ignore[attr-defined]


def test_a_trials_time_limit_follows_its_span_and_the_budget() -> None:
    import numpy as np

    plan = TrialPlan(2.0, (), 0, offsets=np.array([0.0, 50.0, 100.0]))
    params = CapacityParams(target="t")
    assert trial_time_limit(plan, params, None) == pytest.approx(100 * 1.5 + 60)
    assert trial_time_limit(plan, params, 90.0) == 90.0
    assert trial_time_limit(plan, CapacityParams(target="t", trial_duration_s=30.0), None) == 30.0
    closed = TrialPlan(4.0, (), 0, concurrency=4)
    assert trial_time_limit(closed, params, None) is None and trial_time_limit(closed, params, 70.0) == 70.0


# -- statistically honest -----------------------------------------------------------------------------


def result_with(fluid: bool, tokens: int = 20) -> ProbeResult:
    gap = 0.01 if fluid else 1.0
    times = [0.1 + i * gap for i in range(tokens)]
    return ProbeResult(
        api="completions", scheduled_at=0.0, sent_at=0.0, finished_at=times[-1], token_times=times,
        token_counts=[1] * tokens, max_tokens=tokens, prompt_tokens_intended=10, outcome=Outcome.OK,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fluid", "total", "expected"),
    [(200, 200, "inconclusive"), (198, 200, "inconclusive"), (185, 200, "fail"), (40, 40, "inconclusive")],
)
def test_a_trial_at_p99_is_inconclusive_unless_its_interval_clears_the_objective(
    fluid: int, total: int, expected: str
) -> None:
    """200 requests cannot vouch for 99% (it takes 367 fluid in a row at 95%): a clean trial is
    inconclusive, not a pass; 15 misses of 200 are a confident failure."""
    slo = TrialSlo(DeadlinePolicy(prefill_deadline=1.0), decode_deadline=0.05)
    results = [result_with(True)] * fluid + [result_with(False)] * (total - fluid)
    verdict_ = judge(results, slo)
    assert verdict_.figures["verdict"] == expected
    assert verdict_.figures["fluid_requests"] == fluid
    low, high = verdict_.figures["pass_interval"]
    assert low <= fluid / total <= high
    assert verdict_.passed is (fluid >= math.ceil(0.99 * total))  # the point verdict still steers


def test_trials_at_one_load_are_pooled() -> None:
    settings = SearchSettings(start=1.0, max_load=100.0, required=P99)
    history = [Observation(5.0, True, 1.2, 200, 200), Observation(5.0, True, 1.1, 199, 200)]
    (merged,) = pool(settings, history)
    assert (merged.successes, merged.requests, merged.parts, merged.passed) == (399, 400, 2, True)
    assert verdict(settings, merged) is Verdict.INCONCLUSIVE  # 399/400: the interval still reaches 98.7%
    merged_fail = pool(settings, [*history, Observation(5.0, False, 0.9, 190, 200)])[0]
    assert merged_fail.passed is False  # 589/600 = 98.2% < 99%: the repeat turned the load over


def test_an_inconclusive_end_is_repeated_before_the_search_believes_it() -> None:
    settings = SearchSettings(start=1.0, max_load=100.0, required=P99, max_parts=3)
    history = [Observation(10.0, True, 1.01, 200, 200), Observation(10.4, False, 0.9, 170, 200)]
    assert next_load(settings, history) == 10.0  # converged on points, but 200/200 is not a confident pass
    history += [Observation(10.0, True, 1.02, 200, 200)]
    assert next_load(settings, history) is None
    assert outcome(settings, history) is State.FOUND  # 400/400: the interval starts at 99.08%
    unsure = [Observation(10.0, True, 1.01, 199, 200)] * 3 + [history[1]]
    assert next_load(settings, unsure) is None and outcome(settings, unsure) is State.INCONCLUSIVE


def test_an_end_is_repeated_only_where_more_of_the_same_could_settle_it() -> None:
    settings = SearchSettings(start=1.0, max_load=100.0, required=P99, max_parts=3)
    failed = Observation(10.4, False, 0.9, 170, 200)
    # 199/200: even 597/600 leaves the interval straddling 99%, so the search ends inconclusive at once.
    one_miss = [Observation(10.0, True, 1.01, 199, 200), failed]
    assert not could_settle(settings, one_miss[0])
    assert next_load(settings, one_miss) is None and outcome(settings, one_miss) is State.INCONCLUSIVE
    # 200/200 could become 600/600 (low end 99.5%); 195/200 could become 585/600 (high end 98.5%).
    assert could_settle(settings, Observation(10.0, True, 1.01, 200, 200))
    assert could_settle(settings, Observation(10.4, False, 0.9, 195, 200))
    unsure_fail = [Observation(10.0, True, 1.01, 200, 200)] * 3 + [Observation(10.4, False, 0.99, 195, 200)]
    assert next_load(settings, unsure_fail) == 10.4
    # Point verdicts (no required share) are never repeated.
    assert not could_settle(SearchSettings(start=1.0, max_load=100.0), Observation(10.0, True, 1.0, 200, 200))


def test_no_end_is_repeated_when_the_other_cannot_settle() -> None:
    """200/200 at the lower end could settle, but 197/200 at the upper end stays inconclusive even over
    600 requests: the search cannot end ``found``, so a repeat at the lower end would buy nothing."""
    settings = SearchSettings(start=1.0, max_load=100.0, required=P99, max_parts=3)
    history = [Observation(10.0, True, 1.01, 200, 200), Observation(10.4, False, 0.99, 197, 200)]
    assert could_settle(settings, history[0]) and not could_settle(settings, history[1])
    assert next_load(settings, history) is None and outcome(settings, history) is State.INCONCLUSIVE


def test_no_end_is_repeated_while_the_other_is_unsure_too() -> None:
    """200/200 below 196/200: each could settle, but the search would need both to end ``found``, a
    repeat or more each, so it ends inconclusive now (the rule before this one repeated the lower end)."""
    settings = SearchSettings(start=1.0, max_load=100.0, required=P99, max_parts=3)
    history = [Observation(10.0, True, 1.01, 200, 200), Observation(10.4, False, 0.99, 196, 200)]
    assert all(could_settle(settings, end) for end in history)
    assert next_load(settings, history) is None and outcome(settings, history) is State.INCONCLUSIVE


async def test_a_live_repeat_stops_at_the_miss_that_makes_its_pass_impossible() -> None:
    slo = TrialSlo(DeadlinePolicy(prefill_deadline=1.0), decode_deadline=0.05)
    plan = TrialPlan(10.0, tuple(RequestSpec("x", 20) for _ in range(200)), 0, settle=(200, 200))
    tallies = {"settling": Tally(plan, slo), "ordinary": Tally(dataclasses.replace(plan, settle=None), slo)}
    for tally in tallies.values():
        for fluid in (True, True, False):
            result = result_with(fluid)
            result.extra["measured"] = True
            tally.on_result(result)
    assert tallies["settling"].decided.is_set() and tallies["settling"].reason == "cannot_settle"
    assert not tallies["ordinary"].decided.is_set() and tallies["ordinary"].reason is None


def test_a_repeat_at_the_lower_end_is_told_what_it_must_settle() -> None:
    settings = SearchSettings(start=1.0, max_load=100.0, required=P99, max_parts=3)
    history = [Observation(10.0, True, 1.01, 200, 200), Observation(10.4, False, 0.9, 170, 200)]
    assert next_load(settings, history) == 10.0 and settling(settings, history, 10.0) == (200, 200)
    assert settling(settings, history, 10.4) is None  # the upper end's repeat: the failure stop decides
    assert settling(settings, history[:1], 10.0) is None  # not converged: an ordinary trial


@pytest.mark.parametrize(
    ("settle", "failures", "planned", "expected"),
    [
        ((200, 200), 1, 200, "cannot_settle"),  # 399/400 at best: the interval reaches below 99%
        ((200, 200), 0, 200, None),
        (None, 1, 200, None),  # an ordinary trial: one miss decides nothing
        ((200, 200), 7, 200, "early_stop"),  # a confident failure of its own comes first
        ((600, 600), 1, 200, None),  # 799/800 could still be a confident pass
    ],
)
def test_a_trial_run_to_settle_a_pass_stops_once_it_cannot(
    settle: tuple[int, int] | None, failures: int, planned: int, expected: str | None
) -> None:
    slo = TrialSlo(DeadlinePolicy(prefill_deadline=1.0), decode_deadline=0.05)
    plan = TrialPlan(10.0, tuple(RequestSpec("x", 8) for _ in range(planned)), 0, settle=settle)
    assert stop_reason(failures, plan, slo) == expected
    assert stop_reason(failures, dataclasses.replace(plan, early_stop=False), slo) is None


def test_a_trial_that_could_not_settle_counts_only_what_it_saw() -> None:
    """Unlike a confident failure's stop, which counts the requests it did not wait for as met (the
    failure holds even then), a stop for want of a pass must not lean towards that pass."""
    trial = counted(10.0, 29, 30)
    trial.planned, trial.ended_by = 200, "cannot_settle"
    assert trial.counts() == (29, 30)
    trial.ended_by = "early_stop"
    assert trial.counts() == (199, 200)


async def test_the_search_hands_the_settle_counts_to_the_repeat() -> None:
    settings = SearchSettings(start=10.0, max_load=100.0, required=P99, max_parts=3)
    asked: list[tuple[float, object]] = []

    async def trial(ask: TrialAsk) -> TrialReport:
        load, settle = ask.load, ask.settle
        asked.append((load, settle))
        if load <= 10.0:
            return counted(load, 200, 200, headroom=1.01) if settle is None else counted(load, 29, 30)
        return counted(load, 170, 200, headroom=0.9)

    result = await run(settings, trial)
    assert asked[-1] == (10.0, (200, 200))
    assert result.state is State.INCONCLUSIVE and result.lower_bound == 10.0  # type: ignore[attr-defined]


def test_early_stopping_needs_the_confidence_of_a_full_trial() -> None:
    """The CI trials decided by their first two requests: at p99 of 120, 2 misses are certain to sink
    the point verdict but are no confident failure; the stop now waits for one."""
    assert decided_failure(2, 120, 99.0)  # the old rule
    assert not decided_failure(2, 120, 99.0, confidence=0.95)
    needed = next(f for f in range(121) if decided_failure(f, 120, 99.0, confidence=0.95))
    assert 4 <= needed <= 8
    # Once confident, the stop agrees with the full trial's interval: a confident failure.
    slo = TrialSlo(DeadlinePolicy(prefill_deadline=1.0), decode_deadline=0.05)
    full = judge([result_with(True)] * (120 - needed) + [result_with(False)] * needed, slo)
    assert full.figures["verdict"] == "fail"


# -- drained engine, progress ------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_a_trial_waits_for_the_engine_to_drain() -> None:
    clock, readings = FakeClock(), iter([12.0, 5.0, 1.0, 0.0])

    async def busy() -> float | None:
        return next(readings)

    drained = await wait_drained(busy, DrainTimes(poll_s=1.0), clock.sleep, clock)
    assert (drained.how, drained.waited_s) == ("engine_idle", 3.0)


async def test_the_drain_wait_is_bounded_and_falls_back_to_a_pause() -> None:
    clock = FakeClock()

    async def stuck() -> float | None:
        return 3.0

    drained = await wait_drained(stuck, DrainTimes(max_wait_s=10.0, poll_s=1.0), clock.sleep, clock)
    assert drained.how == "max_wait" and drained.waited_s <= 10.0

    async def unknown() -> float | None:
        return None

    clock.now = 0.0
    paused = await wait_drained(unknown, DrainTimes(settle_s=2.0), clock.sleep, clock)
    assert (paused.how, paused.waited_s) == ("settled", 2.0)


async def test_the_search_reports_each_drain_wait_and_counts_it_against_the_budget() -> None:
    from exporter.jobs.capacity_loop import Drained

    async def drain() -> Drained:
        return Drained(30.0, "engine_idle")

    async def trial(ask: TrialAsk) -> TrialReport:
        load = ask.load
        return counted(load, 200, 200, headroom=50.0)

    settings = SearchSettings(start=1.0, max_load=1000.0, max_trials=20)
    result = await run(settings, trial, drain=drain, time_budget_s=380.0)
    waits = [t.drain_wait_s for t in result.trials]  # type: ignore[attr-defined]
    assert waits[0] == 0.0 and all(w == 30.0 for w in waits[1:])  # the first trial starts at once
    assert len(waits) == 3  # 100 + 130 + 130 = 360 s, and the next drain leaves less than 10 s


def test_progress_counts_requests_and_ends_at_one() -> None:
    import numpy as np

    told: list[tuple[float, str]] = []
    progress = SearchProgress(CapacityParams(target="t", max_trials=8), lambda f, m: told.append((f, m)))
    plan = TrialPlan(2.0, tuple(range(10)), 0, offsets=np.arange(10.0))  # type: ignore[arg-type]
    progress.started(1, 2.0, plan)
    assert told[-1][0] == 0.0 and "trial 1/8: 2 req/s, 10 requests" in told[-1][1]
    for _ in range(5):
        progress.request_done(ProbeResult(api="completions"))
    assert told[-1][0] == pytest.approx(0.5 / 6)  # half of one of the six expected trials
    assert "5/10 done" in told[-1][1]
    fractions = [f for f, _ in told]
    assert fractions == sorted(fractions)
    figures = {"fluid_share": 1.0, "pass_interval": [0.7, 1.0]}
    report = TrialReport(1, 2.0, True, "", 1.4, figures, requests_sent=10, duration_s=5.0, tokens=100)
    progress.trial_done(report)
    assert told[-1][1].startswith("trial 1: 2 req/s, pass fraction 100.0% [70.0%, 100.0%], pass")
    for index in range(2, 9):  # past the six expected trials: the fraction holds, it does not fall back
        progress.started(index, 2.0, plan)
        for _ in range(10):
            progress.request_done(ProbeResult(api="completions"))
        progress.trial_done(report)
    fractions = [f for f, _ in told]
    assert fractions == sorted(fractions) and fractions[-1] == 0.99


# -- planning ------------------------------------------------------------------------------------------


async def test_the_first_trial_is_planned_once_and_a_plan_given_up_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worst case is read off the first trial's plan before the search, and the first trial then
    takes that plan (it planned it twice: 40 ms at the jobs' 2,000 requests, ~20 s at a million)."""
    planned: list[tuple[float, bool]] = []
    plan_trial = capacity_runner.plan_trial

    def counting(*args: object, **kwargs: object) -> TrialPlan:
        planned.append((args[1], args[3] is not None))  # type: ignore[arg-type]
        return plan_trial(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(capacity_runner, "plan_trial", counting)
    workload = Workload("w", IndependentLengths(Fixed(16), Fixed(4)))
    params = CapacityParams(target="t", requests_per_trial=50, warmup_requests=5)
    client = ProbeClient(TargetSettings("http://127.0.0.1:9"))
    trials = capacity_runner._SearchTrials(params, workload, SLO, SearchTarget(lambda: client), None, None)
    first = await capacity_runner._first_plan(trials, 2.0, workload, None)
    again = await trials.planned(TrialAsk(FIRST_TRIAL, 2.0, True, 30.0))  # the index the search gives it
    assert planned == [(2.0, True)]  # once, stoppable
    assert again.specs == first.specs and again.early_stop and again.time_limit_s == 30.0
    await trials.planned(TrialAsk(FIRST_TRIAL, 2.0, True))  # taken: a later call plans afresh
    assert planned == [(2.0, True), (2.0, True)]
    stop = threading.Event()
    stop.set()
    with pytest.raises(PlanStoppedError, match="after 0 of 55 requests"):
        plan_trial(
            workload,
            2.0,
            TrialShape(concurrency=False, arrival="poisson", warmup=5, requests=50, seed=1, salt=0),
            stop,
        )


@pytest.mark.parametrize(("alone", "trials"), [((3, 3), 1), ((2, 5), 1), ((1, 1), 5), ((1, 20), 5)])
async def test_a_failure_with_the_engine_idle_ends_the_search_not_met(
    alone: tuple[int, int], trials: int
) -> None:
    """Requests that had the engine to themselves and still missed, confidently: no lower load can
    help, and the search ends after that trial. One request alone is no pattern, nor one miss of 20
    (inconclusive at p99): those searches run on, halving, to the floor (4, 2, 1, 0.5, 0.25)."""
    settings = SearchSettings(start=4.0, max_load=20.0, max_trials=30, floor=0.25, required=P99)
    missed, requests = alone

    async def trial(ask: TrialAsk) -> TrialReport:
        load = ask.load
        report = counted(load, 0, 120, headroom=0.5)
        report.figures["alone"] = {
            "requests": requests, "missed": missed,
            "verdict": str(classify_fraction(requests - missed, requests, P99)),
        }  # fmt: skip
        return report

    result = await run(settings, trial)
    assert result.state is State.NOT_MET and len(result.trials) == trials  # type: ignore[attr-defined]
    stopped_by = result.stopped_by  # type: ignore[attr-defined]
    assert stopped_by.startswith("floor: fails with the engine idle") == (trials == 1)
    assert stop_kind(stopped_by) == "floor"  # the daemon and its alert read it as the floor's not met
