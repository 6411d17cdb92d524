"""Capacity trials of multi-turn sessions: the same lengths every trial, every turn measured except the
warm-up sessions', and the token bound counting the conversation each turn re-sends."""

from __future__ import annotations

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.trial import TrialShape, plan_trial, run_trial
from exporter.jobs.trial_verdict import TrialSlo
from exporter.load.workloads import IndependentLengths, Workload
from exporter.probe.client import ProbeClient
from exporter.settings.lengths import Fixed
from exporter.settings.target import TargetSettings
from exporter.settings.think_time import parse_think_time
from tests.support.sim import StartSim

WORKLOAD = Workload(
    "talk",
    IndependentLengths(Fixed(100), Fixed(8)),
    turns=Fixed(3),
    followup_lengths=IndependentLengths(Fixed(20), Fixed(8)),
    think_time=parse_think_time("fixed:0.01"),
)


def test_a_session_trial_plans_sessions_with_common_lengths() -> None:
    one, two = (
        plan_trial(
            WORKLOAD,
            2.0,
            TrialShape(concurrency=False, arrival="poisson", warmup=3, requests=9, seed=5, salt=1),
        ),
        plan_trial(
            WORKLOAD,
            4.0,
            TrialShape(concurrency=False, arrival="poisson", warmup=3, requests=9, seed=5, salt=2),
        ),
    )
    assert one.warmup == 1 and len(one.specs) == 4 and one.measured == 9  # 1 warm-up session, then 3
    assert [len(s.followups) for s in one.specs] == [len(s.followups) for s in two.specs] == [2] * 4
    assert one.offsets is not None and two.offsets is not None
    assert (one.offsets == 2 * two.offsets).all()  # the same gaps, scaled to the load
    assert one.specs[0].prompt != two.specs[0].prompt  # fresh texts: no cache hits across trials
    # Per session: 100 + 8, then (100 + 8 + 20) + 8, then (128 + 8 + 20) + 8.
    assert one.planned_tokens == 4 * (108 + 136 + 164)


async def test_a_session_trial_measures_every_turn_but_the_warm_up_sessions(start_sim: StartSim) -> None:
    server = await start_sim()
    plan = plan_trial(
        WORKLOAD, 5.0, TrialShape(concurrency=False, arrival="poisson", warmup=3, requests=9, seed=5, salt=3)
    )
    slo = TrialSlo(DeadlinePolicy(prefill_deadline=2.0), decode_deadline=0.5)
    async with ProbeClient(TargetSettings(base_url=server.url)) as client:
        report = await run_trial(
            1, plan, slo, lambda spec, at, started: client.send(spec, at, on_start=started)
        )
    assert report.passed and report.requests_sent == 12  # 4 sessions of 3 turns
    assert report.figures["requests"] == 9 and report.figures["completed"] == 9
