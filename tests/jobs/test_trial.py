"""Planning a capacity trial: the same lengths and gaps in every trial of a search, and an open loop
that offers exactly its nominal rate over the measured requests."""

from __future__ import annotations

import numpy as np
import pytest

from exporter.jobs.trial import TrialShape, alone_in_flight, at_unit_rate, plan_trial
from exporter.load.workloads import IndependentLengths, Workload
from exporter.settings.arrival import Poisson
from exporter.settings.lengths import Fixed

WORKLOAD = Workload("plain", IndependentLengths(Fixed(100), Fixed(8)))


@pytest.mark.parametrize("seed", range(5))
def test_a_rate_trial_offers_its_nominal_rate_over_the_measured_requests(seed: int) -> None:
    plan = plan_trial(
        WORKLOAD,
        35.0,
        TrialShape(concurrency=False, arrival="poisson", warmup=5, requests=40, seed=seed, salt=1),
    )
    assert plan.offsets is not None
    measured = plan.offsets[plan.warmup :]
    # (n - 1) over the span, as the trial's verdict computes the offered rate from the schedule.
    assert (len(measured) - 1) / (measured[-1] - measured[0]) == pytest.approx(35.0, rel=1e-12)


def test_the_gaps_keep_their_shape_and_order() -> None:
    unit = Poisson(1.0).offsets(45, np.random.default_rng(0))
    raw_rate = 39 / (unit[-1] - unit[5])
    assert abs(raw_rate - 1) > 0.1  # seed 0's own sample: far from its process's rate
    scaled = at_unit_rate(unit, warmup=5)
    # one factor for every measured gap (0.815 here), and one for the warm-up's
    assert np.allclose(np.diff(scaled[5:]) / np.diff(unit[5:]), raw_rate)
    warm = 5 / (unit[5] - unit[0])
    assert np.allclose(np.diff(scaled[:6]) / np.diff(unit[:6]), warm)
    assert (np.diff(scaled) >= 0).all()


@pytest.mark.parametrize("seed", range(5))
def test_the_warm_up_comes_at_the_trials_rate_too(seed: int) -> None:
    """Scaled by the measured requests' factor, 20 warm-up requests before 10 measured came at about
    twice the rate (21 sent in 10 s at 1 req/s)."""
    plan = plan_trial(
        WORKLOAD,
        1.0,
        TrialShape(concurrency=False, arrival="poisson", warmup=20, requests=10, seed=seed, salt=1),
    )
    assert plan.offsets is not None
    assert 20 / (plan.offsets[20] - plan.offsets[0]) == pytest.approx(1.0, rel=1e-12)
    measured = plan.offsets[20:]
    assert (len(measured) - 1) / (measured[-1] - measured[0]) == pytest.approx(1.0, rel=1e-12)


def test_too_few_measured_arrivals_are_left_as_they_are() -> None:
    unit = np.array([0.0, 0.5, 2.0])
    assert (at_unit_rate(unit, warmup=2) == unit).all()  # one measured arrival: no span to scale


@pytest.mark.parametrize(
    ("spans", "alone"),
    [
        ([(0.0, 1.0), (2.0, 3.0)], [True, True]),  # one after the other
        ([(0.0, 1.0), (1.0, 2.0)], [True, True]),  # the next sent as the first ended
        ([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)], [False, False, True]),
        ([(0.0, 10.0), (1.0, 2.0), (3.0, 4.0)], [False, False, False]),  # a long one overlaps both
        ([(0.0, 0.0), (0.0, 1.0)], [False, False]),  # a zero-length span counts as its own
        ([(4.0, 4.0)], [True]),
    ],
)
def test_a_request_is_alone_when_no_other_was_in_flight_from_its_send_to_its_end(
    spans: list[tuple[float, float]], alone: list[bool]
) -> None:
    assert alone_in_flight(np.array(spans, dtype=np.float64)).tolist() == alone
