"""Arrival processes against their distributions, with fixed seeds (so no flakiness): KS tests of the
gaps, mean rates, coefficients of variation, and replay scaling."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from exporter.settings.arrival import (
    Constant,
    Gamma,
    Poisson,
    TraceReplay,
    gaps,
    offsets_within,
    parse_arrival_spec,
)

N = 20_000


def _gaps(process: Any, seed: int) -> np.ndarray:
    offsets = process.offsets(N, np.random.default_rng(seed))
    assert offsets[0] == 0.0
    assert np.all(np.diff(offsets) >= 0)
    return gaps(offsets)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rate", [0.5, 10.0, 200.0])
def test_poisson_gaps_are_exponential(rate: float, seed: int) -> None:
    g = _gaps(Poisson(rate), seed)
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue > 0.001
    assert 1 / g.mean() == pytest.approx(rate, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("shape", [0.25, 0.5, 1.0, 2.0, 8.0])
def test_gamma_gaps_have_the_shape_and_rate(shape: float) -> None:
    rate = 20.0
    g = _gaps(Gamma(rate, shape), seed=7)
    assert stats.kstest(g, "gamma", args=(shape, 0, 1 / (rate * shape))).pvalue > 0.001
    assert 1 / g.mean() == pytest.approx(rate, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1 / math.sqrt(shape), rel=0.05)


def test_gamma_shape_one_is_poisson_and_the_ks_test_has_power() -> None:
    g = _gaps(Gamma(10.0, 1.0), seed=3)
    assert stats.kstest(g, "expon", args=(0, 0.1)).pvalue > 0.001
    bursty = _gaps(Gamma(10.0, 0.5), seed=3)
    assert stats.kstest(bursty, "expon", args=(0, 0.1)).pvalue < 1e-6


def test_constant_is_exact() -> None:
    offsets = Constant(4.0).offsets(5, np.random.default_rng(0))
    assert offsets.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_offsets_are_seeded() -> None:
    a = Poisson(5).offsets(100, np.random.default_rng(42))
    b = Poisson(5).offsets(100, np.random.default_rng(42))
    assert np.array_equal(a, b)


def test_trace_replay_scales_time_and_rate() -> None:
    replay = TraceReplay((100.0, 100.5, 102.0, 104.0), time_scale=0.5)
    assert replay.offsets(4, np.random.default_rng(0)).tolist() == [0.0, 0.25, 1.0, 2.0]
    assert replay.rate == pytest.approx(3 / 2.0)
    with pytest.raises(ValueError, match=r"trace replay: the trace has 4 timestamps; asked for 5"):
        replay.offsets(5, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("stamps", "scale", "message"),
    [
        ((), 1.0, "trace replay: the trace has no timestamps"),
        ((1.0, 0.5), 1.0, "trace replay: timestamps must be non-decreasing (sort the trace first)"),
        ((1.0,), 0.0, "trace replay: time_scale must be a number > 0, got 0.0"),
    ],
)
def test_trace_replay_errors(stamps: tuple[float, ...], scale: float, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        TraceReplay(stamps, scale)
    assert str(caught.value) == message


def test_offsets_within_a_duration() -> None:
    rng = np.random.default_rng(5)
    offsets = offsets_within(Poisson(100.0), 30.0, rng)
    assert offsets[-1] < 30.0
    assert len(offsets) == pytest.approx(3000, rel=0.06)
    assert offsets_within(Constant(2.0), 2.0, rng).tolist() == [0.0, 0.5, 1.0, 1.5]
    assert offsets_within(TraceReplay((0.0, 1.0, 5.0)), 2.0, rng).tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("poisson:rate=10", Poisson(10.0)),
        ("gamma:rate=10,shape=0.5", Gamma(10.0, 0.5)),
        ("gamma:rate=10,burstiness=0.5", Gamma(10.0, 0.5)),
        ("gamma:rate=3", Gamma(3.0, 1.0)),
        ("constant:rate=2.5", Constant(2.5)),
        ({"kind": "poisson", "rate": 4}, Poisson(4.0)),
    ],
)
def test_parse_arrival_spec(spec: Any, expected: object) -> None:
    assert parse_arrival_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("poison:rate=1", 'unknown arrival process "poison"; valid: constant, gamma, poisson'),
        ("poisson:rate=1,shape=2", 'poisson: unknown field "shape"; valid: rate'),
        ("gamma:rate=1,cv=2", 'gamma: unknown field "cv"; valid: rate, shape, burstiness'),
        ("poisson", 'poisson: missing field "rate" (requests per second)'),
        ("poisson:rate=fast", "poisson: field \"rate\" must be a number, got 'fast'"),
        ("poisson:rate=0", 'poisson: field "rate" must be a number > 0 (requests per second), got 0.0'),
        ("gamma:rate=1,shape=-1", 'gamma: field "shape" must be a number > 0 (1 = Poisson), got -1.0'),
        ("constant:10", 'constant: expected field=value, got "10"'),
    ],
)
def test_parse_arrival_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_arrival_spec(spec)
    assert str(caught.value) == message
