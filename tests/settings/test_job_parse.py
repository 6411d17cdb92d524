"""Job parameters: bad bodies as a table with the exact problems, good bodies round-tripped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.settings.job_params import CapacityParams, JobLimits, ProfileParams
from exporter.settings.job_parse import params_to_dict, parse_params
from exporter.settings.problems import SettingsError
from exporter.settings.slo import SloSpec
from exporter.stats.objectives import GoodputBounds, parse_objective

LIMITS = JobLimits()
CAPACITY_VALID = (
    "arrival, confidence, early_stop, load, max_load, max_trials, min_load, module, requests_per_trial, seed, "
    "slo, start, target, time_budget_s, tolerance, trial_duration_s, warmup_requests, workers"
)

BAD: dict[str, tuple[str, Any, list[str]]] = {
    "unknown-kind": (
        "capacty",
        {"target": "a"},
        ['kind: unknown job kind "capacty"; valid: capacity, prefill-profile'],
    ),
    "not-a-mapping": ("capacity", ["a"], ["(top level): must be a mapping, got a list"]),
    "missing-target": ("capacity", {}, ["target: missing (required)"]),
    "empty-target": ("prefill-profile", {"target": " "}, ['target: must be a non-empty string, got " "']),
    "unknown-key": (
        "capacity",
        {"target": "a", "max_rate": 3},
        [f'(top level): unknown key "max_rate"; valid: {CAPACITY_VALID}'],
    ),
    "rate-limits": (
        "capacity",
        {"target": "a", "start": 30, "max_load": 50},
        ["start: 30 exceeds jobs.limits.max_rate (20)", "max_load: 50 exceeds jobs.limits.max_rate (20)"],
    ),
    "start-above-max-load": (
        "capacity",
        {"target": "a", "start": 5, "max_load": 2},
        ["start: 5 is above max_load (2)"],
    ),
    "concurrency-limits": (
        "capacity",
        {"target": "a", "load": "concurrency", "start": 1.5, "max_load": 100},
        [
            "start: must be a whole number of requests in flight for a concurrency search, got 1.5",
            "max_load: 100 exceeds jobs.limits.max_concurrency (64)",
        ],
    ),
    "load-values": (
        "capacity",
        {"target": "a", "load": "tokens", "start": 0, "max_load": "lots"},
        [
            'load: unknown value "tokens"; valid: rate, concurrency',
            "start: must be a number > 0, got 0",
            'max_load: must be a number > 0, got "lots"',
        ],
    ),
    "arrival-with-rate": (
        "capacity",
        {"target": "a", "arrival": "poisson:rate=3"},
        ['arrival: leave the rate out of "poisson:rate=3": the search sets it for each trial'],
    ),
    "arrival-unknown": (
        "capacity",
        {"target": "a", "arrival": "burst"},
        ['arrival: unknown arrival process "burst"; valid: constant, gamma, poisson'],
    ),
    "arrival-bad-field": (
        "capacity",
        {"target": "a", "arrival": "gamma:cv=2"},
        ['arrival: gamma: unknown field "cv"; valid: rate, shape, burstiness'],
    ),
    "arrival-not-a-string": (
        "capacity",
        {"target": "a", "arrival": {"kind": "poisson"}},
        ["arrival: must be an arrival process without a rate, e.g. poisson, got a mapping"],
    ),
    "trial-sizes": (
        "capacity",
        {"target": "a", "requests_per_trial": 5, "warmup_requests": -1, "tolerance": 0.6, "max_trials": 0},
        [
            "tolerance: must be a number in (0, 0.5], got 0.6",
            "max_trials: must be an integer >= 1, got 0",
            "warmup_requests: must be an integer >= 0, got -1",
            "requests_per_trial: must be an integer >= 10, got 5",
        ],
    ),
    "trial-limits": (
        "capacity",
        {"target": "a", "max_trials": 20, "requests_per_trial": 1990, "trial_duration_s": "2h"},
        [
            "max_trials: 20 exceeds jobs.limits.max_trials (12)",
            "requests_per_trial: requests_per_trial + warmup_requests = 2010 exceeds "
            "jobs.limits.max_requests_per_trial (2000)",
            "trial_duration_s: 7200 exceeds jobs.limits.max_duration (3600)",
        ],
    ),
    "min-load-above-max-load": (
        "capacity",
        {"target": "a", "min_load": 15, "max_load": 10},
        ["min_load: 15 is above max_load (10)"],
    ),
    "concurrency-above-what-a-trial-holds": (
        "capacity",
        {
            "target": "a",
            "load": "concurrency",
            "max_load": 60,
            "requests_per_trial": 50,
            "warmup_requests": 10,
        },
        [
            "max_load: concurrency 60 is above 30, the most a trial of 60 requests (warmup_requests + "
            "requests_per_trial) holds as a closed loop (every slot sends at least two); raise requests_per_trial"
        ],
    ),
    "trial-duration-below-one-trial": (
        "capacity",
        {"target": "a", "trial_duration_s": "1s"},
        ["trial_duration_s: 1 s is below one trial's minimum (10 s)"],
    ),
    "budget-below-one-trial": (
        "capacity",
        {"target": "a", "time_budget_s": "5s"},
        ["time_budget_s: 5 s is below one trial's minimum (10 s)"],
    ),
    "warmup-alone-over-the-limit": (
        "capacity",
        {"target": "a", "warmup_requests": 1995},
        [
            "warmup_requests: requests_per_trial + warmup_requests = 2005 exceeds "
            "jobs.limits.max_requests_per_trial (2000)"
        ],
    ),
    "bad-types": (
        "capacity",
        {"target": 3, "module": "", "early_stop": "yes", "seed": -1, "trial_duration_s": "5x"},
        [
            "target: must be a non-empty string, got 3",
            'module: must be a non-empty string, got ""',
            'trial_duration_s: bad duration "5x"; use seconds (a number) or a number with a unit: ms, s, m, h, '
            "d (e.g. 250ms, 30s, 5m, 1h)",
            'early_stop: must be true or false, got "yes"',
            "seed: must be an integer >= 0, got -1",
        ],
    ),
    "slo-problems": (
        "capacity",
        {
            "target": "a",
            "slo": {
                "decode_tier": "fast",
                "target_fluidity": 1.5,
                "percentile": 0,
                "prefill_deadline_s": 0,
                "objectives": ["ttft:p99<2", 7],
                "goodput": {"ttft": "2s", "min_fluidity": 2, "tbt": 1},
                "min_goodput_ratio": 0,
                "p99": 1,
            },
        },
        [
            'slo: unknown key "p99"; valid: decode_deadline_s, decode_tier, goodput, min_goodput_ratio, '
            "objectives, percentile, prefill_deadline_s, target_fluidity",
            'slo.goodput: unknown key "tbt"; valid: e2e, max_tbt, min_fluidity, normalized_latency, tpot, ttft',
            'slo.decode_tier: unknown decode tier "fast"; valid: strict, medium, relaxed (or give decode_deadline_s)',
            "slo.prefill_deadline_s: must be a duration > 0, got 0",
            "slo.target_fluidity: must be a number in (0, 1], got 1.5",
            "slo.percentile: must be a number in (0, 100], got 0",
            'slo.objectives[0]: SLO "ttft:p99<2" needs a bound written pNN<=threshold or pNN>=threshold',
            "slo.objectives[1]: must be an SLO like ttft:p99<=2, got 7",
            "slo.goodput.min_fluidity: must be a number in [0, 1], got 2",
            "slo.min_goodput_ratio: must be a number in (0, 1], got 0",
        ],
    ),
    # Two ways to give one deadline: the tier was read and then ignored without a word.
    "decode-tier-and-deadline": (
        "capacity",
        {"target": "a", "slo": {"decode_tier": "strict", "decode_deadline_s": "40ms"}},
        [
            "slo.decode_tier: give either decode_tier (a tier: strict, medium, relaxed) or decode_deadline_s "
            "(a deadline of its own), not both"
        ],
    ),
    # Found by the OpenAPI fuzz test: a mapping (or list) is unhashable, and the tier check raised.
    "decode-tier-not-a-string": (
        "capacity",
        {"target": "a", "slo": {"decode_tier": {"x": 1}}},
        [
            "slo.decode_tier: must be a tier, got a mapping; valid: strict, medium, relaxed "
            "(or give decode_deadline_s)"
        ],
    ),
    "slo-not-a-mapping": (
        "capacity",
        {"target": "a", "slo": "strict"},
        ['slo: must be a mapping, got "strict"'],
    ),
    "profile-lengths": (
        "prefill-profile",
        {"target": "a", "lengths": [128, 0, "x", 40000], "repeats": 0, "apply": 1},
        [
            "lengths[1]: must be a prompt length in tokens (an integer >= 1), got 0",
            'lengths[2]: must be a prompt length in tokens (an integer >= 1), got "x"',
            "lengths[3]: 40000 exceeds jobs.limits.max_prompt_tokens (32768)",
            "repeats: must be an integer in [1, 100], got 0",
            "apply: must be true or false, got 1",
        ],
    ),
    "profile-lengths-twice": (
        "prefill-profile",
        {"target": "a", "lengths": [512, 128, 128, 512, 64]},
        ["lengths: 128, 512 given more than once; list each length once"],
    ),
    "profile-empty-lengths": (
        "prefill-profile",
        {"target": "a", "lengths": []},
        ["lengths: must list at least one prompt length"],
    ),
    "profile-lengths-wrong-type": (
        "prefill-profile",
        {"target": "a", "lengths": "128,256"},
        ['lengths: must be a list of prompt lengths or {low, high}, got "128,256"'],
    ),
    "profile-ladder": (
        "prefill-profile",
        {"target": "a", "lengths": {"low": 512, "high": 100000, "step": 2}},
        [
            'lengths: unknown key "step"; valid: high, low',
            "lengths.high: 100000 exceeds jobs.limits.max_prompt_tokens (32768)",
        ],
    ),
    "profile-ladder-upside-down": (
        "prefill-profile",
        {"target": "a", "lengths": {"low": 512, "high": 256}},
        ["lengths.low: 512 is above high (256)"],
    ),
    "profile-unknown-key": (
        "prefill-profile",
        {"target": "a", "module": "m"},
        ['(top level): unknown key "module"; valid: apply, lengths, repeats, target, workers'],
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_params_report_every_problem_exactly(name: str) -> None:
    kind, body, expected = BAD[name]
    with pytest.raises(SettingsError) as caught:
        parse_params(kind, body, LIMITS)
    assert caught.value.problems == expected
    assert str(caught.value) == "\n".join(expected)


def test_an_integer_may_be_written_as_a_whole_number_with_a_point() -> None:
    """JSON Schema's integer, which the served OpenAPI document promises, includes 3.0 (the fuzzer sent
    a seed of 9007199254740992.0 and got a 400)."""
    params = parse_params("capacity", {"target": "a", "seed": 9007199254740992.0, "max_trials": 4.0}, LIMITS)
    assert isinstance(params, CapacityParams)
    assert (params.seed, params.max_trials) == (2**53, 4) and isinstance(params.seed, int)
    with pytest.raises(SettingsError) as caught:
        parse_params("capacity", {"target": "a", "seed": 1.5}, LIMITS)
    assert caught.value.problems == ["seed: must be an integer >= 0, got 1.5"]


def test_limits_are_the_configured_ones() -> None:
    limits = JobLimits(max_rate=5, max_trials=3, max_prompt_tokens=1000)
    with pytest.raises(SettingsError) as caught:
        parse_params("capacity", {"target": "a", "max_load": 6, "max_trials": 4}, limits)
    assert caught.value.problems == [
        "max_load: 6 exceeds jobs.limits.max_rate (5)",
        "max_trials: 4 exceeds jobs.limits.max_trials (3)",
    ]


def test_defaults_are_lowered_to_low_limits() -> None:
    limits = JobLimits(max_trials=3, max_requests_per_trial=50, max_prompt_tokens=1000)
    capacity = parse_params("capacity", {"target": "a"}, limits)
    assert isinstance(capacity, CapacityParams)
    assert capacity.max_trials == 3
    assert capacity.warmup_requests + capacity.requests_per_trial <= 50
    assert capacity.requests_per_trial >= 10
    profile = parse_params("prefill-profile", {"target": "a"}, limits)
    assert isinstance(profile, ProfileParams)
    assert profile.lengths == (128, 256, 512, 1000)
    smallest = parse_params("capacity", {"target": "a"}, JobLimits(max_requests_per_trial=10))
    assert isinstance(smallest, CapacityParams)
    assert (smallest.warmup_requests, smallest.requests_per_trial) == (0, 10)


def test_minimal_bodies_get_the_dataclass_defaults() -> None:
    assert parse_params("capacity", {"target": "a"}, LIMITS) == CapacityParams(target="a")
    assert parse_params("prefill-profile", {"target": "a"}, LIMITS) == ProfileParams(target="a")


def test_a_full_capacity_body() -> None:
    body = {
        "target": "local-vllm",
        "module": "chat-short",
        "load": "concurrency",
        "arrival": "gamma:shape=0.5",
        "start": 2,
        "max_load": 32,
        "tolerance": 0.1,
        "max_trials": 10,
        "requests_per_trial": 300,
        "warmup_requests": 0,
        "trial_duration_s": "5m",
        "early_stop": False,
        "seed": 7,
        "slo": {
            "decode_deadline_s": "40ms",
            "prefill_deadline_s": 1.5,
            "target_fluidity": 0.95,
            "percentile": 90,
            "objectives": ["ttft:p99<=2", "fluidity:p90>=0.9"],
            "goodput": {"ttft": "2s", "tpot": 0.1, "min_fluidity": 0.9},
            "min_goodput_ratio": 0.9,
        },
    }
    params = parse_params("capacity", body, LIMITS)
    assert params == CapacityParams(
        target="local-vllm",
        module="chat-short",
        load="concurrency",
        arrival="gamma:shape=0.5",
        start=2.0,
        max_load=32.0,
        tolerance=0.1,
        max_trials=10,
        requests_per_trial=300,
        warmup_requests=0,
        trial_duration_s=300.0,
        early_stop=False,
        seed=7,
        slo=SloSpec(
            decode_deadline_s=0.04,
            prefill_deadline_s=1.5,
            target_fluidity=0.95,
            percentile=90.0,
            objectives=(parse_objective("ttft:p99<=2"), parse_objective("fluidity:p90>=0.9")),
            goodput=GoodputBounds(ttft=2.0, tpot=0.1, min_fluidity=0.9),
            min_goodput_ratio=0.9,
        ),
    )
    assert isinstance(params, CapacityParams)


GOOD: list[tuple[str, dict[str, Any]]] = [
    ("capacity", {"target": "a"}),
    (
        "capacity",
        {"target": "a", "arrival": "constant", "start": 0.5, "max_load": 20, "trial_duration_s": 60},
    ),
    (
        "capacity",
        {"target": "a", "slo": {"objectives": ["e2e:p99.9<=30"], "goodput": {"max_tbt": "250ms"}}},
    ),
    ("capacity", {"target": "a", "load": "concurrency", "max_load": 64, "slo": {"decode_tier": "strict"}}),
    # The tier left out of the JSON form: the pair would read back refused.
    ("capacity", {"target": "a", "slo": {"decode_deadline_s": "40ms"}}),
    ("capacity", {"target": "a", "slo": {"decode_tier": "relaxed", "decode_deadline_s": None}}),
    ("prefill-profile", {"target": "a", "lengths": [100, 1000, 10000], "repeats": 5, "apply": False}),
    ("prefill-profile", {"target": "a", "lengths": {"low": 100, "high": 1000}}),
]


@pytest.mark.parametrize(("kind", "body"), GOOD)
def test_good_bodies_round_trip_through_json(kind: str, body: dict[str, Any]) -> None:
    params = parse_params(kind, body, LIMITS)
    data = json.loads(json.dumps(params_to_dict(params), allow_nan=False))
    assert parse_params(kind, data, LIMITS) == params
    assert isinstance(params, CapacityParams if kind == "capacity" else ProfileParams)


def test_the_json_form_shows_every_field() -> None:
    params = parse_params("capacity", {"target": "a", "slo": {"objectives": ["ttft:p99<=2"]}}, LIMITS)
    data = params_to_dict(params)
    assert data["slo"]["objectives"] == ["ttft:p99<=2"] and data["slo"]["goodput"] is None
    assert set(data) == set(CAPACITY_VALID.split(", "))
    profile = params_to_dict(
        parse_params("prefill-profile", {"target": "a", "lengths": {"low": 1, "high": 4}}, LIMITS)
    )
    assert profile == {"target": "a", "lengths": [1, 2, 4], "repeats": 3, "apply": True, "workers": None}


@pytest.mark.parametrize("kind", ["capacity", "prefill-profile"])
def test_workers_are_bounded_by_jobs_workers(kind: str) -> None:
    limits = JobLimits(max_workers=2)
    assert parse_params(kind, {"target": "a"}, limits).workers is None  # jobs.workers decides
    assert parse_params(kind, {"target": "a", "workers": 2}, limits).workers == 2
    with pytest.raises(SettingsError) as caught:
        parse_params(kind, {"target": "a", "workers": 3}, limits)
    assert caught.value.problems == [
        "workers: 3 exceeds jobs.workers (2), the most client processes a job may use (bounded by the CPUs "
        "the exporter's container may use)"
    ]
    with pytest.raises(SettingsError) as caught:
        parse_params(kind, {"target": "a", "workers": 0}, limits)
    assert caught.value.problems == ["workers: must be an integer >= 1, got 0"]
