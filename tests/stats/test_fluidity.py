"""Fluidity-index tests: a literal per-token loop is the reference, and the library must equal it exactly."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import (
    FluidityOptions,
    deadline_miss_curve,
    deadline_misses,
    evaluate,
    fluid_token_rate,
    fluidity_index,
    min_decode_deadline,
    min_decode_deadlines,
    request_fluidity,
)
from exporter.stats.fluidity_engines import DeadlineSweep, loop_request
from exporter.stats.min_deadline import LOOP_BISECTION_MAX_REQUESTS, LOOP_SEARCH_MAX_REQUESTS
from tests.stats.strategies import traces


def reference_misses(
    intervals: Sequence[float],
    dp: float,
    dd: float,
    ignore_first: bool = False,
    cap: float | None = None,
    variant: str = "deadlines",
) -> tuple[int, int]:
    """Etalon's algorithm as a literal per-token loop over Python floats (the test oracle)."""
    slack, missed, total = 0.0, 0, 0
    for i, t in enumerate(intervals):
        if i == 0 and ignore_first:
            continue
        deadline = dp if i == 0 else dd
        if t <= deadline + slack:
            slack += deadline - t
            if cap is not None:
                slack = min(slack, cap)
            total += 1
        else:
            misses = math.floor((t - slack - deadline) / dd) + 1 if variant == "deadlines" else 1
            missed += misses
            total += misses
            slack = 0.0
    return missed, total


def reference_fluidity(intervals: Sequence[float], dp: float, dd: float, **kwargs: object) -> float:
    missed, total = reference_misses(intervals, dp, dd, **kwargs)  # type: ignore[arg-type]
    return 1.0 - missed / total if total else 1.0


# --- closed forms and the paper's examples -------------------------------------------------------


@pytest.mark.parametrize(
    ("intervals", "dp", "dd", "expected"),
    [
        # Binary fractions keep the arithmetic exact, so these are the paper's numbers, not rounding's.
        pytest.param([], 0.5, 0.125, (0, 0), id="empty request has no deadlines"),
        pytest.param([0.25], 0.5, 0.125, (0, 1), id="single token on time"),
        pytest.param([0.5], 0.5, 0.125, (0, 1), id="deadline is inclusive"),
        pytest.param([0.75], 0.5, 0.125, (3, 3), id="late first token counts in units of Dd"),
        pytest.param([0.125] + [0.0625] * 9, 0.5, 0.0625, (0, 10), id="uniform gaps at the deadline"),
        pytest.param([0.125, 0.0, 0.0, 0.0], 0.5, 0.0625, (0, 4), id="chunk burst of zero gaps"),
        pytest.param([0.5, 0.375], 0.5, 0.125, (3, 4), id="stall spanning three deadlines"),
        pytest.param([0.5, 0.125, 0.125, 0.75], 0.5, 0.25, (2, 5), id="banked slack shortens the stall"),
        pytest.param([0.5, 0.5, 0.25], 0.5, 0.25, (2, 4), id="deadlines restart after a stall"),
    ],
)
def test_closed_forms(intervals: list[float], dp: float, dd: float, expected: tuple[int, int]) -> None:
    assert deadline_misses(intervals, dp, dd) == expected
    assert reference_misses(intervals, dp, dd) == expected


def test_paper_example_early_stall_hurts_late_stall_is_absorbed() -> None:
    # Etalon section 4: the same 4 s stall early in a stream breaks fluidity; late in a long, fast
    # stream the slack banked by early tokens absorbs it.
    fast = [0.01] * 1000
    early = [0.1, 4.0, *fast]
    late = [0.1, *fast, 4.0]
    assert fluidity_index(early, 0.5, 0.05) < 1.0
    # The stall: floor((4.0 - 0.4 banked - 0.05) / 0.05) + 1 = 72 missed of 72 + 1001 met.
    assert fluidity_index(early, 0.5, 0.05) == 1 - 72 / 1073
    assert fluidity_index(late, 0.5, 0.05) == 1.0


def test_ignore_first_token_makes_decode_only_fluidity() -> None:
    slow_prefill = [3.0, 0.02, 0.02]
    assert fluidity_index(slow_prefill, 0.5, 0.05) < 1.0
    assert fluidity_index(slow_prefill, 0.5, 0.05, FluidityOptions(ignore_first_token=True)) == 1.0
    assert deadline_misses(slow_prefill, 0.5, 0.05, FluidityOptions(ignore_first_token=True)) == (0, 2)


def test_slack_cap_limits_what_early_tokens_bank() -> None:
    intervals = [0.0, 0.0, 0.0, 0.0, 0.3]  # four instant tokens bank 0.4 s, then a 0.3 s gap
    assert deadline_misses(intervals, 0.1, 0.1) == (0, 5)
    assert deadline_misses(intervals, 0.1, 0.1, FluidityOptions(slack_cap=0.1)) == (1, 5)


def test_tokens_variant_counts_each_late_token_once() -> None:
    intervals = [0.125, 1.0, 0.0625]
    assert deadline_misses(intervals, 0.5, 0.0625, FluidityOptions(variant="tokens")) == (1, 3)
    assert deadline_misses(intervals, 0.5, 0.0625) == (10, 12)


def test_stall_statistics_report_frequency_duration_and_timing() -> None:
    intervals = [0.1, 0.02, 0.02, 0.9, 0.02, 0.4, 0.02, 0.02]
    stats = request_fluidity(intervals, 0.5, 0.05)
    assert stats.late_events == 2
    assert stats.longest_stall == 0.9
    assert stats.first_miss_index == 3
    assert stats.first_miss_fraction == 3 / 8
    healthy = request_fluidity([0.1, 0.02], 0.5, 0.05)
    assert (healthy.late_events, healthy.longest_stall, healthy.first_miss_index) == (0, 0.0, None)
    assert healthy.first_miss_fraction is None


def test_service_level_is_token_weighted() -> None:
    batch = IntervalBatch.from_sequences([[0.5, 0.375], [0.125] + [0.0625] * 98])
    result = evaluate(batch, 0.5, 0.125)
    assert list(result.missed) == [3, 0]
    assert result.service_level == 1 - 3 / (3 + 1 + 99)
    assert result.fluidity[0] == 1 - 3 / 4
    assert result.service_level is not None and np.mean(result.fluidity) < result.service_level


def test_a_service_level_from_no_deadline_is_none_not_one() -> None:
    assert evaluate(IntervalBatch.from_sequences([]), 0.5, 0.125).service_level is None
    one_token = IntervalBatch.from_sequences([[0.2]])
    assert math.isnan(deadline_miss_curve(one_token, [0.05]).miss_rate[0])  # decode-only: no deadline


def test_per_request_deadlines() -> None:
    batch = IntervalBatch.from_sequences([[0.375, 0.125], [0.375, 0.125]])
    result = evaluate(batch, np.array([0.5, 0.25]), np.array([0.125, 0.0625]))
    assert [result.request(i).missed for i in range(2)] == [0, 5]
    assert result.request(1).total == 5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: fluidity_index([0.1], 0.5, 0.0),
            "decode deadline must be a finite number > 0 seconds, got 0.0",
        ),
        (
            lambda: fluidity_index([0.1], 0.5, -1.0),
            "decode deadline must be a finite number > 0 seconds, got -1.0",
        ),
        (lambda: fluidity_index([0.1], -0.5, 0.1), "prefill deadline must be a finite number >= 0 seconds"),
        (lambda: fluidity_index([0.1, -0.2], 0.5, 0.1), "interval 1 of request 0 is -0.2"),
        (lambda: fluidity_index([math.nan], 0.5, 0.1), "interval 0 of request 0 is nan"),
        (
            lambda: fluidity_index([0.1], 0.5, 0.1, FluidityOptions(variant="paper")),
            'unknown fluidity variant "paper"; valid',
        ),  # type: ignore[arg-type]
        (
            lambda: fluidity_index([0.1], 0.5, 0.1, FluidityOptions(slack_cap=-1.0)),
            "slack_cap must be None or a finite",
        ),
        (lambda: min_decode_deadline([0.1, 0.1], 1.5), "target fluidity must be in (0, 1], got 1.5"),
        (lambda: fluid_token_rate([[0.1]]), "at least one request with two or more tokens"),
        (lambda: fluid_token_rate([[0.1, 0.1]], percentile=0), "percentile must be in (0, 100], got 0"),
    ],
)
def test_bad_input_names_the_value(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=None) as error:
        call()  # type: ignore[operator]
    assert message in str(error.value)


# --- property tests against the reference loop ----------------------------------------------------

options = st.builds(
    FluidityOptions,
    ignore_first_token=st.booleans(),
    slack_cap=st.none() | st.sampled_from([0.0, 0.05]) | st.floats(0.0, 1.0),
    variant=st.sampled_from(["deadlines", "tokens"]),
)


@settings(max_examples=400, deadline=None)
@given(traces(), options)
def test_batch_equals_per_token_loop(
    trace: tuple[list[list[float]], float, float], opts: FluidityOptions
) -> None:
    requests, dp, dd = trace
    result = evaluate(IntervalBatch.from_sequences(requests), dp, dd, opts)
    for i, intervals in enumerate(requests):
        expected = reference_misses(intervals, dp, dd, opts.ignore_first_token, opts.slack_cap, opts.variant)
        assert (result.request(i).missed, result.request(i).total) == expected
        assert result.fluidity[i] == reference_fluidity(
            intervals, dp, dd, ignore_first=opts.ignore_first_token, cap=opts.slack_cap, variant=opts.variant
        )


@settings(max_examples=200, deadline=None)
@given(traces())
def test_stall_stats_match_a_direct_scan(trace: tuple[list[list[float]], float, float]) -> None:
    requests, dp, dd = trace
    result = evaluate(IntervalBatch.from_sequences(requests), dp, dd)
    for i, intervals in enumerate(requests):
        late = _late_tokens(intervals, dp, dd)
        stats = result.request(i)
        assert stats.late_events == len(late)
        assert stats.longest_stall == max((intervals[j] for j in late), default=0.0)
        assert stats.first_miss_index == (late[0] if late else None)


def _late_tokens(intervals: Sequence[float], dp: float, dd: float) -> list[int]:
    slack, late = 0.0, []
    for i, t in enumerate(intervals):
        deadline = dp if i == 0 else dd
        if t <= deadline + slack:
            slack += deadline - t
        else:
            late.append(i)
            slack = 0.0
    return late


@settings(max_examples=150, deadline=None)
@given(traces(), st.sampled_from([0.5, 0.9, 0.99, 1.0]), st.sampled_from(["deadlines", "tokens"]))
def test_min_decode_deadline_is_exact_to_the_last_float(
    trace: tuple[list[list[float]], float, float], target: float, variant: str
) -> None:
    requests, _, _ = trace
    minima = min_decode_deadlines(IntervalBatch.from_sequences(requests), target, variant=variant)  # type: ignore[arg-type]
    for intervals, deadline in zip(requests, minima, strict=True):
        kwargs = {"ignore_first": True, "variant": variant}
        if deadline == 0.0:  # any positive deadline meets the target
            assert reference_fluidity(intervals, 1.0, 1e-9, **kwargs) >= target
            continue
        assert reference_fluidity(intervals, 1.0, deadline, **kwargs) >= target
        assert reference_fluidity(intervals, 1.0, np.nextafter(deadline, 0.0), **kwargs) < target
        assert deadline <= max(intervals[1:])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 0.3), min_size=2, max_size=60), st.lists(st.floats(0.001, 0.3), min_size=2))
def test_fluidity_never_falls_as_the_decode_deadline_grows(
    intervals: list[float], deadlines: list[float]
) -> None:
    values = [
        fluidity_index(intervals, 0.5, dd, FluidityOptions(ignore_first_token=True))
        for dd in sorted(deadlines)
    ]
    assert values == sorted(values)


# --- minimum deadline and fluid token rate -------------------------------------------------------


def test_uniform_gaps_give_exactly_their_rate() -> None:
    stream = [0.3] + [0.02] * 255
    assert min_decode_deadline(stream) == 0.02
    assert fluid_token_rate([stream] * 100) == 50.0
    # Etalon's 1e-4 s search grid would report 49.8 tok/s here; machine precision gives the true rate.
    assert fluid_token_rate([[0.3] + [1 / 30] * 100]) == pytest.approx(30.0, rel=1e-12)


def test_fluid_rate_uses_the_percentile_of_per_request_minima() -> None:
    fast = [0.1] + [0.01] * 50
    slow = [0.1] + [0.04] * 50
    requests = [fast] * 99 + [slow]
    assert fluid_token_rate(requests, percentile=99) == 100.0
    assert fluid_token_rate(requests, percentile=100) == 25.0
    assert fluid_token_rate([*requests, [0.5]], percentile=99) == 100.0  # single-token requests are left out


def test_one_stall_within_the_allowed_misses_does_not_move_the_minimum() -> None:
    stream = [0.1] + [0.02] * 99 + [0.06]  # one late token out of 100 is within 10% misses
    assert min_decode_deadline(stream, 0.9) == 0.02
    assert min_decode_deadline(stream, 1.0) > 0.02


def test_all_zero_gaps_meet_any_deadline() -> None:
    assert min_decode_deadline([0.1, 0.0, 0.0]) == 0.0
    assert min_decode_deadline([0.1]) == 0.0
    assert fluid_token_rate([[0.1, 0.0, 0.0]]) == math.inf


def test_deadline_miss_curve_falls_with_the_deadline() -> None:
    batch = IntervalBatch.from_sequences([[0.2, 0.03, 0.03, 0.2, 0.03], [0.1, 0.06, 0.06]])
    curve = deadline_miss_curve(batch, [0.01, 0.025, 0.05, 0.1, 0.2])
    assert list(curve.miss_rate) == sorted(curve.miss_rate, reverse=True)
    assert curve.miss_rate[-1] == 0.0
    missed = [
        reference_misses(r, 1.0, 0.05, ignore_first=True)
        for r in ([0.2, 0.03, 0.03, 0.2, 0.03], [0.1, 0.06, 0.06])
    ]
    assert curve.miss_rate[2] == sum(m for m, _ in missed) / sum(t for _, t in missed)


# --- both engines and the exact hand-over ---------------------------------------------------------


def test_measured_streams_take_the_fast_path() -> None:
    rng = np.random.default_rng(3)
    requests = [rng.lognormal(np.log(0.045), 0.6, int(n)) for n in rng.integers(1, 400, 300)]
    result = evaluate(IntervalBatch.from_sequences(requests), 0.5, 0.05)
    assert result.exact_fallbacks == 0
    assert int(result.late_events.sum()) > 50  # the trace does have stalls to decide
    for i, intervals in enumerate(requests):
        assert (result.request(i).missed, result.request(i).total) == reference_misses(
            intervals.tolist(), 0.5, 0.05
        )


def test_tokens_exactly_on_their_deadlines_go_through_the_exact_loop() -> None:
    on_the_line = [0.3] + [0.1] * 20 + [0.1 + 0.2] + [0.1] * 5  # slack rounds around zero
    result = evaluate(IntervalBatch.from_sequences([on_the_line, [0.1, 0.01]]), 0.3, 0.1)
    assert result.exact_fallbacks == 1
    assert (result.request(0).missed, result.request(0).total) == reference_misses(on_the_line, 0.3, 0.1)


@settings(max_examples=200, deadline=None)
@given(traces(), options)
def test_deadline_sweep_equals_per_token_loop(
    trace: tuple[list[list[float]], float, float], opts: FluidityOptions
) -> None:
    requests, dp, dd = trace
    batch = IntervalBatch.from_sequences(requests)
    counts = DeadlineSweep(batch.columns, opts, with_stall_stats=True).run(dp, dd)
    result = counts.in_request_order(batch.columns.rank_to_request)
    for i, intervals in enumerate(requests):
        expected = loop_request(intervals, dp, dd, opts)
        assert result.request(i) == expected
        reference = reference_misses(intervals, dp, dd, opts.ignore_first_token, opts.slack_cap, opts.variant)
        assert (expected.missed, expected.total) == reference


@settings(max_examples=25, deadline=None)
@given(
    traces(),
    st.sampled_from([0.5, 0.9, 1.0]),
    st.sampled_from(["deadlines", "tokens"]),
    st.sampled_from([None, 0.05]),
)
def test_every_bisection_path_agrees(
    trace: tuple[list[list[float]], float, float], target: float, variant: str, cap: float | None
) -> None:
    requests, _, _ = trace
    # More requests than the loop paths take: the search runs without a cap, the sweep with one.
    many = (requests * 40)[:40]
    assert len(many) > max(LOOP_BISECTION_MAX_REQUESTS, LOOP_SEARCH_MAX_REQUESTS)
    batched = min_decode_deadlines(IntervalBatch.from_sequences(many), target, slack_cap=cap, variant=variant)  # type: ignore[arg-type]
    by_loop = [min_decode_deadline(r, target, slack_cap=cap, variant=variant) for r in many]  # type: ignore[arg-type]
    assert batched.tolist() == by_loop


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0, 0.2), max_size=60),
    st.sampled_from([0.0, 0.05, 0.5]),
    st.sampled_from([0.01, 0.025, 0.1]),
    st.booleans(),
    st.sampled_from([None, 0.0, 0.03]),
    st.sampled_from(["deadlines", "tokens"]),
)
def test_one_requests_accounting_is_the_engines(
    gaps: list[float], dp: float, dd: float, skip_first: bool, cap: float | None, variant: str
) -> None:
    """``request_fluidity`` runs the per-token loop for one request (a tenth of the engine's cost, on
    ``bench``'s event loop): every field must be the engine's on a batch of one."""
    options = FluidityOptions(skip_first, cap, variant)  # type: ignore[arg-type]
    engine = evaluate(IntervalBatch.single(gaps), dp, dd, options).request(0)
    assert request_fluidity(gaps, dp, dd, options) == engine


def test_one_requests_invalid_input_is_named_as_the_engine_names_it() -> None:
    with pytest.raises(ValueError, match="decode deadline"):
        request_fluidity([0.1], 0.1, 0.0)
    with pytest.raises(ValueError):
        request_fluidity([-0.1], 0.1, 0.05)
