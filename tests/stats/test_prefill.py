"""Tests of exporter.stats.prefill: the non-negative quadratic fit, its JSON form and prompt buckets."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.stats.prefill import (
    PrefillModel,
    PromptBucket,
    dump_json,
    fit_prefill_model,
    nnls_by_support,
    parse_json,
    support_residual,
    ttft_by_prompt_bucket,
)

A, B, C = 0.02, 1e-4, 1e-8
PROMPTS = np.array([0.0, 100.0, 200.0, 400.0, 1600.0])


def _quadratic(p: Any, a: float = A, b: float = B, c: float = C) -> Any:
    return a + b * p + c * p**2


def test_fit_recovers_an_exact_quadratic() -> None:
    model = fit_prefill_model(PROMPTS, _quadratic(PROMPTS))
    assert model.coefficients == pytest.approx((A, B, C), rel=1e-9)
    assert model.prompt_range == (0.0, 1600.0)
    assert model.sample_count == 5
    assert model.rmse < 1e-12


def test_fit_clamps_a_falling_trend_to_its_mean() -> None:
    # Unconstrained, this is a line of slope -0.001; every support with a slope is infeasible or worse.
    model = fit_prefill_model([0, 100, 200], [0.3, 0.2, 0.1])
    assert model.coefficients == pytest.approx((0.2, 0.0, 0.0))
    assert model.rmse == pytest.approx(math.sqrt(0.02 / 3))


def test_fit_without_intercept_when_data_goes_through_zero() -> None:
    p = np.array([1000.0, 2000.0, 4000.0])
    model = fit_prefill_model(p, 1e-6 * p**2)
    assert model.coefficients == pytest.approx((0.0, 0.0, 1e-6), abs=1e-15)


def test_single_sample_gives_a_constant() -> None:
    model = fit_prefill_model([512], [0.1])
    assert model.coefficients == pytest.approx((0.1, 0.0, 0.0), abs=0.0)
    assert model.predict(8192) == pytest.approx(0.1)


def test_all_zero_prompts_fit_the_mean() -> None:
    model = fit_prefill_model([0, 0], [0.1, 0.3])
    assert model.predict(0.0) == pytest.approx(0.2)


def test_extrapolation_keeps_growing_beyond_the_profiled_range() -> None:
    model = fit_prefill_model(PROMPTS, _quadratic(PROMPTS))
    longest = PROMPTS.max()
    assert model.predict(4 * longest) == pytest.approx(_quadratic(4 * longest), rel=1e-9)
    assert model.predict(4 * longest) > model.predict(2 * longest) > model.predict(longest)


def test_predict_scalar_and_array() -> None:
    model = PrefillModel((1.0, 2.0, 3.0), (0.0, 10.0), 3, 0.0)
    assert model.predict(2) == 17.0
    assert isinstance(model.predict(2.0), float)
    assert list(model.predict(np.array([0.0, 1.0, 2.0]))) == [1.0, 6.0, 17.0]


def test_deadline_adds_the_scheduling_slack() -> None:
    model = PrefillModel((1.0, 2.0, 3.0), (0.0, 10.0), 3, 0.0)
    assert model.deadline(2.0) == 17.0
    assert model.deadline(2.0, scheduling_slack=0.5) == 17.5
    assert list(model.deadline(np.array([1.0]), 1.0)) == [7.0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.predict(-1.0), "prompt_length 0 is -1.0; must be finite and >= 0"),
        (lambda m: m.predict(np.array([1.0, math.nan])), "prompt_length 1 is nan"),
        (
            lambda m: m.deadline(1.0, scheduling_slack=-0.1),
            "scheduling_slack must be finite and >= 0, got -0.1",
        ),
    ],
)
def test_predict_and_deadline_errors(call: Any, message: str) -> None:
    model = PrefillModel((1.0, 2.0, 3.0), (0.0, 10.0), 3, 0.0)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(model)


@pytest.mark.parametrize(
    ("prompts", "ttfts", "message"),
    [
        ([], [], "need at least 1 (prompt length, TTFT) sample, got 0"),
        ([1, 2, 3], [0.1, 0.2], "got 3 prompt lengths but 2 TTFTs; they must pair up"),
        ([1, -5], [0.1, 0.2], "prompt length 1 is -5.0; must be finite and >= 0"),
        ([1, 2], [math.nan, 0.2], "TTFT 0 is nan; must be finite and >= 0"),
        ([1, math.inf], [0.1, 0.2], "prompt length 1 is inf"),
        ([1, 2], [0.1, -0.2], "TTFT 1 is -0.2"),
    ],
)
def test_fit_errors_name_the_problem(prompts: list[float], ttfts: list[float], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        fit_prefill_model(prompts, ttfts)
    assert message in str(raised.value)


def test_model_json_round_trip() -> None:
    model = fit_prefill_model(PROMPTS, _quadratic(PROMPTS) + np.array([0.0, 1e-3, 0.0, -1e-3, 0.0]))
    data = json.loads(dump_json(model))
    assert data["kind"] == "quadratic"
    assert data["version"] == 1
    assert set(data["coefficients"]) == {"a", "b", "c"}
    assert parse_json(dump_json(model)) == model
    assert PrefillModel.from_dict(model.to_dict()) == model


def _good() -> dict[str, Any]:
    return {
        "kind": "quadratic",
        "version": 1,
        "coefficients": {"a": 0.02, "b": 1e-4, "c": 0.0},
        "prompt_range": [16, 4096],
        "sample_count": 12,
        "rmse": 0.001,
    }


def _with(path: str, value: Any) -> dict[str, Any]:
    data = _good()
    *parents, key = path.split(".")
    target = data
    for parent in parents:
        target = target[parent]
    if value is _DELETE:
        del target[key]
    else:
        target[key] = value
    return data


_DELETE = object()

BAD_MODELS = {
    "wrong kind": (_with("kind", "forest"), "prefill model kind must be \"quadratic\", got 'forest'"),
    "future version": (_with("version", 2), "prefill model version must be 1, got 2"),
    "bool version": (_with("version", True), "prefill model version must be 1, got True"),
    "unknown field": (_with("coefs", 1), 'unknown prefill model field "coefs"; valid: kind, version, '),
    "missing field": (_with("rmse", _DELETE), 'prefill model is missing field "rmse"'),
    "negative coefficient": (_with("coefficients.b", -1e-4), "coefficients.b must be finite and >= 0"),
    "text coefficient": (_with("coefficients.a", "0.1"), "coefficients.a must be a number, got '0.1'"),
    "unknown coefficient": (_with("coefficients.d", 1.0), 'unknown coefficients field "d"; valid: a, b, c'),
    # A YAML key may be a number: sorted beside the names, it raised a TypeError.
    "numeric key": ({**_good(), 7: 1, "z": 2}, 'unknown prefill model field "7"; valid: kind, version, '),
    "coefficient list": (
        _with("coefficients", [1, 2, 3]),
        "coefficients must be a mapping with keys a, b, c",
    ),
    "short range": (_with("prompt_range", [1]), "prompt_range must be a list [min, max], got [1]"),
    "reversed range": (_with("prompt_range", [10, 1]), "prompt_range must be [min, max], got [10.0, 1.0]"),
    "negative range": (_with("prompt_range", [-1, 1]), "prompt_range[0] must be finite and >= 0, got -1.0"),
    "zero samples": (_with("sample_count", 0), "sample_count must be >= 1, got 0"),
    "fractional samples": (_with("sample_count", 1.5), "sample_count must be an integer, got 1.5"),
    "text rmse": (_with("rmse", "x"), "rmse must be a number, got 'x'"),
    "not a mapping": ([1, 2], "prefill model must be a mapping, got list"),
}


@pytest.mark.parametrize(("data", "message"), BAD_MODELS.values(), ids=BAD_MODELS.keys())
def test_from_dict_names_the_bad_field(data: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        PrefillModel.from_dict(data)
    assert message in str(raised.value)


def test_from_dict_accepts_the_good_model() -> None:
    assert PrefillModel.from_dict(_good()).coefficients == (0.02, 1e-4, 0.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "prefill model is not valid JSON: "),
        (json.dumps(_good()).replace("0.001", "NaN"), "NaN is not a number JSON allows"),
        ("[]", "prefill model must be a mapping, got list"),
    ],
)
def test_parse_json_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_json(text)
    assert message in str(raised.value)


def test_buckets_with_default_power_of_two_edges() -> None:
    prompts = [0, 1, 3, 2, 100, 128]
    ttfts = [0.1, 0.2, 0.4, 0.2, 1.0, 2.0]
    buckets = ttft_by_prompt_bucket(prompts, ttfts)
    assert [(b.lower, b.upper, b.count) for b in buckets] == [
        (0.0, 1.0, 1),
        (1.0, 2.0, 1),
        (2.0, 4.0, 2),
        (64.0, 128.0, 1),
        (128.0, 256.0, 1),
    ]
    assert isinstance(buckets[2], PromptBucket)
    assert (buckets[2].mean, buckets[2].p99) == pytest.approx((0.3, 0.398))


def test_buckets_with_explicit_edges() -> None:
    buckets = ttft_by_prompt_bucket([10, 20, 30, 900], [1.0, 2.0, 3.0, 9.0], edges=[0, 100, 1000])
    assert [(b.lower, b.upper, b.count, b.mean) for b in buckets] == [(0, 100, 3, 2.0), (100, 1000, 1, 9.0)]
    assert buckets[0].p99 == pytest.approx(2.98)


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        ([0, 10], "2 prompt lengths fall outside the bucket edges [0, 10); widen the edges"),
        ([5, 100], "1 prompt lengths fall outside the bucket edges [5, 100)"),
        ([0], "bucket edges must be at least 2 finite, increasing numbers, got [0]"),
        ([0, 10, 10], "bucket edges must be at least 2 finite, increasing numbers"),
    ],
)
def test_bucket_errors(edges: list[float], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        ttft_by_prompt_bucket([1, 10, 20], [0.1, 0.2, 0.3], edges=edges)
    assert message in str(raised.value)


def test_default_edges_put_short_prompts_in_the_first_bucket() -> None:
    assert [(b.lower, b.upper) for b in ttft_by_prompt_bucket([0.5, 0.0], [1.0, 2.0])] == [(0.0, 1.0)]


coefficient = st.one_of(st.just(0.0), st.floats(1e-6, 1.0))
prompt_sets = st.lists(st.integers(0, 32768), min_size=1, max_size=30)


@given(coefficient, coefficient, coefficient, prompt_sets)
def test_fit_recovers_non_negative_quadratics(a: float, b: float, c: float, prompts: list[int]) -> None:
    # Coefficients per token and per token squared shrunk to realistic magnitudes.
    b, c = b * 1e-3, c * 1e-7
    p = np.array(prompts, dtype=np.float64)
    model = fit_prefill_model(p, _quadratic(p, a, b, c))
    assert model.predict(p) == pytest.approx(_quadratic(p, a, b, c), rel=1e-9, abs=1e-12)
    grid = np.linspace(0.0, 4 * max(p.max(), 1.0), 200)
    predicted = model.predict(grid)
    assert np.all(predicted >= 0.0)
    assert np.all(np.diff(predicted) >= 0.0)


@given(
    st.lists(st.tuples(st.integers(0, 32768), st.floats(0.0, 10.0)), min_size=1, max_size=25),
)
def test_fit_stays_non_negative_and_monotone_on_noisy_data(samples: list[tuple[int, float]]) -> None:
    prompts, ttfts = zip(*samples, strict=True)
    model = fit_prefill_model(prompts, ttfts)
    assert all(c >= 0.0 for c in model.coefficients)
    grid = np.linspace(0.0, 70000.0, 100)
    assert np.all(np.diff(model.predict(grid)) >= 0.0)
    assert model.rmse == pytest.approx(
        math.sqrt(np.mean((model.predict(np.array(prompts, dtype=np.float64)) - ttfts) ** 2)),
        rel=1e-6,
        abs=1e-9,
    )


@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(-1.0, 1.0)), min_size=1, max_size=20))
def test_nnls_is_never_worse_than_any_feasible_support(samples: list[tuple[float, float]]) -> None:
    x = np.array([s[0] for s in samples])
    y = np.array([s[1] for s in samples])
    design = np.column_stack((np.ones_like(x), x, x**2))
    best, residual = nnls_by_support(design, y)
    assert np.all(best >= 0.0)
    assert residual == pytest.approx(support_residual(design, y, best), rel=1e-9, abs=1e-12)
    for size in range(4):
        for support in itertools.combinations(range(3), size):
            solution = np.zeros(3)
            if support:
                solution[list(support)] = np.linalg.lstsq(design[:, list(support)], y, rcond=None)[0]
            # A support whose least squares overflow (hypothesis found lengths of 1e-155, whose squares
            # are subnormal, solving to inf) offers no solution to compare with.
            if np.all(np.isfinite(solution)) and np.all(solution >= 0.0):
                assert residual <= support_residual(design, y, solution) * (1 + 1e-9) + 1e-12
