"""A rate search given no start looks at the target first and starts where its speed says, and says
up front how long it should take and the budget that ends it."""

from __future__ import annotations

import pytest

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity_loop import first_look, look_rate, look_start
from exporter.jobs.capacity_report import SearchProgress, expected_duration_s
from exporter.jobs.capacity_result import LOOK_REQUESTS, FirstLook
from exporter.jobs.capacity_search import SearchSettings
from exporter.jobs.trial_verdict import TrialReport, TrialSlo
from exporter.load.workloads import IndependentLengths, Workload
from exporter.probe.client import ProbeClient
from exporter.settings.job_params import CapacityParams
from exporter.settings.lengths import Fixed
from exporter.settings.target import TargetSettings
from tests.support.sim import StartSim

SLO = TrialSlo(DeadlinePolicy(prefill_deadline=1.0), decode_deadline=0.05)


def report(completed: int, rate: float) -> TrialReport:
    figures = {"completed": completed, "offered_rate_per_s": rate}
    return TrialReport(0, 16.0, True, "pass", 2.0, figures, LOOK_REQUESTS, 5.0, 1000)


@pytest.mark.parametrize(
    ("completed", "rate", "seen"),
    [(32, 9.5, 9.5), (16, 3.0, 3.0), (15, 30.0, None), (32, float("nan"), None), (32, 0.0, None)],
)
def test_the_look_says_a_rate_only_over_half_its_requests_or_more(
    completed: int, rate: float, seen: float | None
) -> None:
    assert look_rate(report(completed, rate)) == seen


@pytest.mark.parametrize(
    ("rate", "passed", "headroom", "start"),
    [
        (2.5, True, 3.0, 7.5),  # past a pass by its headroom (the simulator's 8B model: ~2.5, ~3)
        (2.5, True, 1.2, 5.0),  # at least 2x
        (2.5, True, 9.0, 10.0),  # at most 4x
        (4.0, False, 0.3, 1.2),  # below a failure by its headroom (a half to a quarter)
        (0.001, True, 3.0, 0.75),  # from the floor
        (500.0, True, 3.0, 100.0),  # never past the ceiling
        (None, False, float("nan"), 1.0),  # too few answers: the default start
    ],
)
def test_the_search_starts_where_it_would_go_after_a_trial_like_the_look(
    rate: float | None, passed: bool, headroom: float, start: float
) -> None:
    look = FirstLook(rate, passed, headroom, 5.0, 1000, 32)
    for trials in (1, 8):  # a search of one trial starts where the look says too
        settings = SearchSettings(start=1.0, max_load=100.0, floor=0.25, max_trials=trials)
        assert look_start(look, settings) == pytest.approx(start)


def test_the_expected_duration_and_the_budget_are_said_before_the_first_trial() -> None:
    """The default search on the simulator once ran 7-9 minutes with no estimate shown."""
    params = CapacityParams(target="t")
    # 220 requests at 4 req/s: 55 s, then five trials at 2.5x that load, 22 s each.
    assert expected_duration_s(params, 4.0) == pytest.approx(55.0 + 5 * 22.0)
    # Each trial's last requests take a while after its last send (half the look's span).
    assert expected_duration_s(params, 4.0, tail_s=6.0) == pytest.approx(55.0 + 5 * 22.0 + 6 * 6.0)
    assert expected_duration_s(CapacityParams(target="t", load="concurrency"), 4.0) is None
    lines: list[str] = []
    SearchProgress(params, lambda fraction, message: lines.append(message)).begin(4.0, 3240.0)
    assert lines == ["search from 4 req/s, about 165 s expected over ~6 trials, at most 3240 s (time budget)"]


async def test_a_look_measures_the_rate_the_target_serves(start_sim: StartSim) -> None:
    server = await start_sim()
    workload = Workload("plain", IndependentLengths(Fixed(64), Fixed(8)))
    async with ProbeClient(TargetSettings(base_url=server.url)) as client:
        look = await first_look(
            workload, SLO, lambda spec, at, started: client.send(spec, at, on_start=started), seed=0, salt=1
        )
    assert look.completed == LOOK_REQUESTS and look.tokens >= LOOK_REQUESTS * (64 + 8)
    assert look.rate is not None and look.rate > 1.0 and look.duration_s > 0
