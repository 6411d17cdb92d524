"""Goodput bounds: one reader for the config, the jobs API and ``--goodput``; each bound only with its own
comparison (``ttft>=2`` was once silently read as ``ttft<=2``)."""

from __future__ import annotations

import pytest

from exporter.settings.evaluation_flags import read_evaluation_flags
from exporter.settings.goodput import GOODPUT_KEYS, GOODPUT_OPERATORS
from exporter.settings.job_params import JobLimits
from exporter.settings.job_parse import parse_params
from exporter.settings.parse import load_config
from exporter.stats.objectives import GoodputBounds
from tests.settings.helpers import flag_options


def parse_goodput(text: str) -> GoodputBounds | None:
    """``--goodput TEXT`` as a one-shot run reads it."""
    return read_evaluation_flags(flag_options(goodput=text)).slo.goodput


def test_each_bound_is_read_with_its_own_comparison() -> None:
    bounds = parse_goodput(
        "ttft<=2, tpot<=100ms,e2e<=30,max_tbt<=0.5,normalized_latency<=0.2,min_fluidity>=0.9"
    )
    assert bounds == GoodputBounds(
        ttft=2.0, tpot=0.1, e2e=30.0, max_tbt=0.5, normalized_latency=0.2, min_fluidity=0.9
    )


@pytest.mark.parametrize("name", GOODPUT_KEYS)
@pytest.mark.parametrize("operator", ["<=", ">=", "=", "<", ">", "=>", "=<", "!="])
def test_a_wrong_comparison_is_refused_naming_the_bound_and_the_valid_one(name: str, operator: str) -> None:
    valid = GOODPUT_OPERATORS[name]
    if operator == valid:
        assert parse_goodput(f"{name}{operator}0.5") is not None
        return
    with pytest.raises(ValueError, match=f"{name} takes {valid} only") as raised:
        parse_goodput(f"{name}{operator}0.5")
    assert f"e.g. {name}{valid}" in str(raised.value)


def test_the_comparisons_are_the_configs() -> None:
    assert {key: ">=" if key == "min_fluidity" else "<=" for key in GOODPUT_KEYS} == GOODPUT_OPERATORS


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "latency<=1",
            'unknown bound "latency"; valid: ttft, tpot, e2e, max_tbt, normalized_latency, min_fluidity',
        ),
        ("ttft", '"ttft": ttft takes <= only (got no comparison), e.g. ttft<=2'),
        ("ttft<=", '"ttft<=" needs a number, e.g. ttft<=2'),
        ("ttft<=fast", 'ttft: bad duration "fast"'),
        ("min_fluidity>=2", "min_fluidity: must be a number in [0, 1], got 2"),
    ],
)
def test_bad_bounds_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_goodput(text)
    assert message in str(raised.value)


def test_flags_config_and_jobs_api_read_the_same_bounds() -> None:
    from_flag = parse_goodput("ttft<=2s,tpot<=0.1,min_fluidity>=0.9")
    config = load_config(
        "targets: [{name: t, url: 'http://127.0.0.1:1'}]\n"
        "slos: {default: {goodput: {ttft: 2s, tpot: 0.1, min_fluidity: 0.9}}}\n"
    )
    body = {"target": "t", "slo": {"goodput": {"ttft": "2s", "tpot": 0.1, "min_fluidity": 0.9}}}
    params = parse_params("capacity", body, JobLimits())
    assert config.slos["default"].goodput == from_flag
    assert params.slo.goodput == from_flag
