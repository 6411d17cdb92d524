"""The SLO: one reader (``read_slo`` and its field readers) for the daemon config, a job's parameters and
the flags, so the same bad value fails with the same message, under its path or its flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.evaluation import DeadlinePolicy, EvaluationSpec
from exporter.report.evaluation_options import evaluation_spec
from exporter.settings import SettingsError, parse_config
from exporter.settings.evaluation_flags import SLO_FLAGS, read_evaluation_flags, read_prefill_flags
from exporter.settings.job_params import JobLimits
from exporter.settings.job_parse import parse_params
from exporter.settings.oneshot import flag_of
from exporter.stats.objectives import GoodputBounds, parse_objective
from exporter.stats.prefill import dump_json, fit_prefill_model
from tests.settings.helpers import flag_options

TARGET = "targets: [{name: t, url: 'http://127.0.0.1:1'}]\n"


def config_problems(slo: dict[str, Any]) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        parse_config(TARGET + "slos: " + json.dumps({"s": slo}) + "\n", environ={})
    return caught.value.problems


def job_problems(slo: dict[str, Any]) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        parse_params("capacity", {"target": "t", "slo": slo}, JobLimits())
    return caught.value.problems


def flag_problem(**given: Any) -> str:
    with pytest.raises(SettingsError) as caught:
        read_evaluation_flags(flag_options(**given))
    return str(caught.value)


# (the config's and the job's SLO mapping, the flags, the message every one of them gives); numbers as a
# --config file gives them (argparse's floats would be quoted as 150.0)
SAME_MESSAGE = {
    "percentile above 100": (
        {"percentile": 150},
        {"percentile": 150},
        "percentile: must be a number in (0, 100], got 150",
    ),
    "target fluidity of 0": (
        {"target_fluidity": 0},
        {"target_fluidity": 0},
        "target_fluidity: must be a number in (0, 1], got 0",
    ),
    "unknown objective metric": (
        {"objectives": ["ttfb:p99<=1"]},
        {"objective": ["ttfb:p99<=1"]},
        'objectives: unknown SLO metric "ttfb"',
    ),
    "bad goodput latency": (
        {"goodput": {"ttft": "fast"}},
        {"goodput": "ttft<=fast"},
        'goodput.ttft: bad duration "fast"',
    ),
}


@pytest.mark.parametrize("name", list(SAME_MESSAGE))
def test_a_bad_slo_value_has_one_message_in_yaml_json_and_flags(name: str) -> None:
    slo, flags, expected = SAME_MESSAGE[name]
    path, _, message = expected.partition(": ")
    flag = flag_of(path, SLO_FLAGS)
    (from_config,) = config_problems(slo)
    (from_job,) = job_problems(slo)
    from_flag = flag_problem(**flags)
    assert from_config.startswith(f"slos.s.{path}") and message in from_config
    assert from_job.startswith(f"slo.{path}") and message in from_job
    assert from_flag.startswith(f"{flag}") and message in from_flag
    # The same text after the path: one reader wrote all three.
    assert len({problem.partition(": ")[2] for problem in (from_config, from_job, from_flag)}) == 1


def test_a_bad_decode_tier_has_one_message_in_yaml_and_flags() -> None:
    (from_config,) = config_problems({"decode_tiers": {"medium": "fast"}})
    from_flag = flag_problem(decode_tiers="medium=fast")
    assert from_config == 'slos.s.decode_tiers.medium: bad duration "fast"; ' + from_config.split("; ", 1)[1]
    assert from_flag == from_config.replace("slos.s.decode_tiers", "--decode-tiers")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"decode_tiers": "medium"}, '--decode-tiers: "medium" needs a deadline, e.g. medium=0.05'),
        ({"decode_tiers": "me dium=0.05"}, '--decode-tiers.me dium: bad name "me dium"'),
        ({"goodput": "ttft>=2"}, '--goodput: "ttft>=2": ttft takes <= only (got >=), e.g. ttft<=2'),
        ({"prefill_deadline": 0.0}, "--prefill-deadline: "),
        ({"scheduling_slack": 0.1}, "--scheduling-slack: applies only with model_file"),
        ({"prefill_model": "/nonexistent/model.json"}, "--prefill-model: cannot read the prefill model"),
        (
            {"percentile": 0.0, "objective": ["ttft:p99<2"]},
            "--percentile: must be a number in (0, 100], got 0.0; --objective: SLO",
        ),
    ],
)
def test_bad_flags_name_the_flag(given: dict[str, Any], message: str) -> None:
    assert message in flag_problem(**given)


def test_flags_and_config_read_the_same_slo(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text(dump_json(fit_prefill_model([128, 512, 2048], [0.05, 0.1, 0.4])))
    config = parse_config(
        TARGET + "slos:\n  default:\n"
        f"    prefill: {{model_file: {model}, scheduling_slack: 250ms}}\n"
        "    decode_tiers: {fast: 25ms, slow: 0.1}\n    target_fluidity: 0.8\n    percentile: 95\n"
        "    objectives: ['ttft:p99<=2']\n    goodput: {ttft: 2s, min_fluidity: 0.9}\n",
        environ={},
    )
    flags = flag_options(
        prefill_model=str(model),
        scheduling_slack=0.25,
        decode_tiers="fast=25ms,slow=0.1",
        target_fluidity=0.8,
        percentile=95.0,
        objective=["ttft:p99<=2"],
        goodput="ttft<=2s,min_fluidity>=0.9",
    )
    spec = evaluation_spec(read_evaluation_flags(flags))
    assert spec == EvaluationSpec.of(config.slos["default"])
    assert spec.goodput == GoodputBounds(ttft=2.0, min_fluidity=0.9)
    assert spec.slos == (parse_objective("ttft:p99<=2"),)


def test_no_flags_give_the_configs_default_slo() -> None:
    spec = evaluation_spec(read_evaluation_flags(flag_options()))
    assert spec == EvaluationSpec.of(parse_config(TARGET, environ={}).slos["default"])
    assert spec == EvaluationSpec()
    deadlines = read_prefill_flags(flag_options(prefill_deadline=2.0))
    assert DeadlinePolicy.of(deadlines) == DeadlinePolicy(prefill_deadline=2.0)


def test_a_flag_path_keeps_a_mappings_key_and_drops_a_lists_index() -> None:
    assert flag_of("decode_tiers.medium", SLO_FLAGS) == "--decode-tiers.medium"
    assert flag_of("objectives[2]", SLO_FLAGS) == "--objective"
    assert flag_of("prefill.deadline", SLO_FLAGS) == "--prefill-deadline"
    assert flag_of("from_scheduled", SLO_FLAGS) == "--from-scheduled"
