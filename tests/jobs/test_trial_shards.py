"""A capacity trial sharded over local worker processes is judged exactly as one process judges it.

The simulator plays scripted timings, so each request's fate does not depend on which process sent
it: the same plan must give the same counts, outcomes and verdict over one process and over two
shards, stop early the same way, and a shard problem must keep the trial from passing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity_loop import TrialAsk, search_capacity
from exporter.jobs.capacity_runner import CapacitySearch, SearchTarget, run_capacity_search
from exporter.jobs.capacity_search import SearchSettings
from exporter.jobs.manager import JobFailedError
from exporter.jobs.trial import TrialPlan, run_sharded_trial, run_trial
from exporter.jobs.trial_verdict import SHARDS_REASON, TrialReport, TrialSlo
from exporter.load.shards.local import local_shards
from exporter.load.shards.pool import ShardPool
from exporter.load.workloads import IndependentLengths, Workload
from exporter.probe.client import ProbeClient
from exporter.settings.job_params import CapacityParams
from exporter.settings.lengths import Fixed
from exporter.settings.shards import PoolSettings
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from exporter.streams.request import RequestSpec
from tests.probe.helpers import script, settings_for

pytestmark = pytest.mark.slow
SLO = TrialSlo(DeadlinePolicy(0.1), decode_deadline=0.05)
COMPARED = ("requests", "completed", "failed", "outcomes", "fluid_share")


@pytest.fixture
async def pool() -> AsyncIterator[ShardPool]:
    # Saturation is not judged here: on this 2-core VM the simulator, the coordinator and two shards
    # share the cores and the shards' loops lag (tests/load/test_shard_problems.py covers the rule).
    settings = PoolSettings(start_delay_s=0.3, max_unreliable_share=1.0)
    async with local_shards(2, None, settings) as shards:
        yield shards


def plan(
    count: int, *, slow_every: int, warmup: int = 4, spacing: float = 0.03, early_stop: bool = False
) -> TrialPlan:
    """Every ``slow_every``-th request streams at 0.12 s a token (fluidity far below 0.9 at Dd 50 ms)."""

    def gaps(i: int) -> float:
        return 0.12 if slow_every and i % slow_every == 0 else 0.005

    specs = tuple(
        RequestSpec(f"p{i}", 10, 3, None, f"r{i}", script(ttft=0.02, gaps=gaps(i))) for i in range(count)
    )
    return TrialPlan(10.0, specs, warmup, np.arange(count) * spacing, None, None, early_stop)


async def both(sim: SimServer, pool: ShardPool, trial: TrialPlan) -> tuple[TrialReport, TrialReport]:
    settings = settings_for(sim)
    async with ProbeClient(settings) as client:
        alone = await run_trial(1, trial, SLO, lambda s, at, started: client.send(s, at, on_start=started))
    sharded = await run_sharded_trial(1, trial, SLO, pool, settings)
    return alone, sharded


async def test_the_same_plan_is_judged_the_same_over_one_process_and_two_shards(
    sim: SimServer, pool: ShardPool
) -> None:
    alone, sharded = await both(sim, pool, plan(44, slow_every=4))
    assert {k: sharded.figures[k] for k in COMPARED} == {k: alone.figures[k] for k in COMPARED}
    assert alone.figures["requests"] == 40 and alone.figures["fluid_share"] == 0.75
    assert sharded.figures["shards"]["problems"] == []
    assert (sharded.passed, sharded.reason) == (alone.passed, alone.reason) == (False, "slo")
    assert sharded.requests_sent == alone.requests_sent == 44
    assert sharded.tokens == alone.tokens
    assert sharded.figures["shards"]["problems"] == []
    assert sorted(s["results"] for s in sharded.figures["shards"]["shards"]) == [22, 22]
    # Headroom is a pure function of the timings: only the simulator's jitter between runs differs.
    assert sharded.headroom == pytest.approx(alone.headroom, rel=0.15)


async def test_a_passing_plan_passes_over_shards(sim: SimServer, pool: ShardPool) -> None:
    alone, sharded = await both(sim, pool, plan(24, slow_every=0))
    assert alone.passed and sharded.passed and sharded.figures["fluid_share"] == 1.0


async def test_a_sharded_trial_stops_early_and_counts_the_cancelled_tokens(
    sim: SimServer, pool: ShardPool
) -> None:
    # Every request fails the target, one every 30 ms for 3 s: decided after the second failure.
    trial = plan(104, slow_every=1, warmup=4, early_stop=True)
    alone, sharded = await both(sim, pool, trial)
    for report in (alone, sharded):
        assert report.stopped_early and not report.passed and report.reason == "slo"
        assert report.requests_sent < 60
        assert report.tokens > 0
    assert sharded.figures["shards"]["problems"] == []


async def test_a_shard_starting_late_keeps_the_trial_from_passing(sim: SimServer) -> None:
    late = PoolSettings(start_delay_s=-0.5, max_start_lateness_s=0.1)
    async with local_shards(2, None, late) as shards:
        report = await run_sharded_trial(1, plan(12, slow_every=0, warmup=0), SLO, shards, settings_for(sim))
    assert not report.passed and report.reason == SHARDS_REASON
    assert any("late (bound 0.1 s)" in p for p in report.figures["shards"]["problems"])
    # Latency counts from the planned send (the trial's from_scheduled): 0.5 s late sinks every request,
    # and the reason says it was the load, not the target.
    assert report.figures["fluid_share"] == 0.0


async def test_a_search_stops_at_a_trial_with_shard_problems() -> None:
    problems = ["shard 1 died: exit code -9"]

    async def trial(ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        figures = {"shards": {"shards": [], "problems": problems}}
        return TrialReport(index, load, False, SHARDS_REASON, 2.0, figures, 10, 1.0, 100)

    result = await search_capacity(SearchSettings(1.0, 100.0, 0.05, 8), trial)
    # Nothing measured the target: no state (it was "not_met", a finding about a target never measured).
    assert len(result.trials) == 1 and result.capacity is None and result.state is None
    assert result.stopped_by == "shards: shard 1 died: exit code -9"
    assert result.unmeasured_stop() == result.stopped_by  # the CLI exits 1, the daemon's job fails


async def test_a_shard_problem_after_a_pass_leaves_that_pass_but_no_answer_to_publish() -> None:
    """What the first trial showed stands (a lower bound), but the search was cut short by us: the
    answer is not published, and the trial that measured nothing is not priced as the highest load."""

    async def trial(ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        if index == 1:
            figures = {"requests": 10, "fluid_requests": 10, "fluid_goodput_tokens_per_s": 30.0}
            return TrialReport(index, load, True, "ok", 3.0, figures, 10, 1.0, 100)
        figures = {"shards": {"shards": [], "problems": ["shard 0 died: exit code -9"]}}
        return TrialReport(index, load, False, SHARDS_REASON, 2.0, figures, 10, 1.0, 100)

    result = await search_capacity(SearchSettings(1.0, 100.0, 0.05, 8), trial)
    assert len(result.trials) == 2 and result.state == "lower_bound" and result.lower_bound == 1.0
    assert result.unmeasured_stop() == "shards: shard 0 died: exit code -9"
    assert result.highest is result.trials[0]
    assert set(result.costs()) == {"capacity", "highest_load"}
    assert result.costs()["highest_load"]["load"] == 1.0


async def test_a_closed_loop_trial_is_judged_the_same_over_shards(sim: SimServer, pool: ShardPool) -> None:
    trial = plan(24, slow_every=3)
    closed = TrialPlan(4.0, trial.specs, trial.warmup, None, 4, None, False)
    alone, sharded = await both(sim, pool, closed)
    assert {k: sharded.figures[k] for k in COMPARED} == {k: alone.figures[k] for k in COMPARED}
    assert sharded.requests_sent == alone.requests_sent == 24
    assert (sharded.passed, sharded.reason) == (alone.passed, alone.reason) == (False, "slo")


async def test_requests_waiting_past_hope_stop_a_sharded_trial(sim: SimServer, pool: ShardPool) -> None:
    # No first token for 3 s, while Dp is 0.1 s: each request is certain to fail long before it ends.
    specs = tuple(RequestSpec(f"p{i}", 10, 3, None, f"r{i}", script(ttft=3.0, gaps=0.005)) for i in range(44))
    trial = TrialPlan(10.0, specs, 4, np.arange(44) * 0.03, None, None, True)
    alone, sharded = await both(sim, pool, trial)
    for report in (alone, sharded):
        assert report.stopped_early and report.reason == "slo" and not report.passed
        assert report.duration_s < 2.5  # decided on waits alone: no request got its first token
        assert report.figures["completed"] == 0
    assert sharded.figures["shards"]["problems"] == []


async def test_sessions_are_refused_over_shards(pool: ShardPool) -> None:
    workload = Workload("chats", IndependentLengths(Fixed(16), Fixed(4)), turns=Fixed(3))
    params = CapacityParams(target="t", workers=2)
    with pytest.raises(JobFailedError, match="multi-turn sessions run in one process"):
        await run_capacity_search(
            CapacitySearch(params, SearchSettings(1.0, 2.0, 0.05, 1), workload, SLO),
            SearchTarget(lambda: ProbeClient(TargetSettings("http://x")), pool),
        )


@pytest.mark.parametrize("closed_loop", [False, True], ids=["open", "closed"])
async def test_a_trial_its_duration_cut_says_so_over_shards_as_in_one_process(
    sim: SimServer, pool: ShardPool, closed_loop: bool
) -> None:
    # 44 requests due over 1.3 s (open) or 44 x ~0.04 s over 2 slots (closed), cut at 0.5 s: both
    # reports must say the duration ended the sends, not that every planned request was sent (the
    # shards' figures once carried no such fact, and a no_data stop said "ended by requests").
    base = plan(44, slow_every=0)
    trial = (
        TrialPlan(2.0, base.specs, base.warmup, None, 2, 0.5, False)
        if closed_loop
        else TrialPlan(base.load, base.specs, base.warmup, base.offsets, None, 0.5, False)
    )
    alone, sharded = await both(sim, pool, trial)
    assert alone.requests_sent < 44 and sharded.requests_sent < 44
    assert alone.ended_by == sharded.ended_by == "duration"
    assert sharded.to_dict()["planned"] == alone.to_dict()["planned"] == 40
    assert sorted(s["ended_by"] for s in sharded.figures["shards"]["shards"]) == ["duration", "duration"]


async def test_a_sharded_trial_that_sent_every_request_ended_by_requests(
    sim: SimServer, pool: ShardPool
) -> None:
    base = plan(12, slow_every=0)
    trial = TrialPlan(base.load, base.specs, base.warmup, base.offsets, None, 30.0, False)
    alone, sharded = await both(sim, pool, trial)
    assert alone.ended_by == sharded.ended_by == "requests"
    assert sharded.requests_sent == alone.requests_sent == 12


async def test_a_sharded_search_cut_in_its_warm_up_says_its_duration_ended_it(
    sim: SimServer, pool: ShardPool
) -> None:
    # 0.1 s of a 0.03 s spacing sends 4 requests, all warm-up: no data, and the stop says why.
    base = plan(24, slow_every=0, warmup=8)
    cut = TrialPlan(base.load, base.specs, base.warmup, base.offsets, None, 0.1, False)

    async def trial(ask: TrialAsk) -> TrialReport:
        index = ask.index
        return await run_sharded_trial(index, cut, SLO, pool, settings_for(sim))

    result = await search_capacity(SearchSettings(10.0, 100.0, 0.05, 4), trial)
    assert result.stopped_by.startswith(
        "no_data: trial 1 at 10 req/s measured no request (4 sent, ended by duration"
    )


async def test_a_sharded_trial_ends_at_its_time_limit_as_in_one_process(
    sim: SimServer, pool: ShardPool
) -> None:
    # Every request takes ~2 s (slow tokens, no early stop) and the trial's time limit is 1 s: both
    # runs stop there, their requests in flight cancelled, and say the time limit ended them (a sharded
    # trial once ran on to the end of its requests, however long the search had left).
    specs = tuple(RequestSpec(f"p{i}", 10, 20, None, f"r{i}", script(ttft=0.02, gaps=0.1)) for i in range(12))
    trial = TrialPlan(10.0, specs, 2, np.arange(12) * 0.03, None, None, False, time_limit_s=1.0)
    alone, sharded = await both(sim, pool, trial)
    for report in (alone, sharded):
        assert report.ended_by == "time_limit" and not report.passed
        assert report.duration_s < 1.9
    assert sharded.figures["shards"]["problems"] == []


async def test_a_trial_cut_short_offers_its_rate_to_every_request_it_sent(
    sim: SimServer, pool: ShardPool
) -> None:
    # The four quick measured requests leave 10 ms apart and come back; the six slow ones leave later
    # and are cut at the time limit. The rate offered is that of all ten sends, not of the four that
    # came back (which read 100 req/s: a goodput above its load).
    quick, slow = script(ttft=0.02, gaps=0.01), script(ttft=0.02, gaps=0.3)
    scripts = [quick] * 6 + [slow] * 6  # two warm-up requests, then four quick and six slow measured
    specs = tuple(RequestSpec(f"p{i}", 10, 10, None, f"r{i}", s) for i, s in enumerate(scripts))
    offsets = np.array([0.0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85])
    trial = TrialPlan(10.0, specs, 2, offsets, None, None, False, time_limit_s=1.3)
    alone, sharded = await both(sim, pool, trial)
    for report in (alone, sharded):
        assert report.ended_by == "time_limit" and report.figures["completed"] == 4
        assert report.figures["offered_rate_per_s"] == pytest.approx(9 / (0.85 - 0.01))
