"""Good configs: defaults, ``${ENV}`` expansion, secrets that never print, and the run-time helpers."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.evaluation import DeadlinePolicy, EvaluationSpec
from exporter.load.config_workloads import config_workload
from exporter.load.prompts import ApproxPromptBuilder, SimPromptBuilder
from exporter.settings import (
    Budget,
    Config,
    GlobalConfig,
    ProbeSchedule,
    SettingsError,
    Slo,
    Target,
    UnknownNameError,
    default_config,
    load_config,
    parse_config,
    parse_duration,
)
from exporter.settings.addresses import check_target_url
from exporter.settings.arrival import Gamma, Poisson
from exporter.settings.job_params import CapacityParams, JobLimits, ProfileParams
from exporter.settings.job_parse import params_to_dict, parse_params
from exporter.settings.lengths import Fixed, LogNormal
from exporter.settings.model import JobsConfig
from exporter.settings.problems import Problems
from exporter.settings.reader import expand_env
from exporter.settings.slo import SloSpec
from exporter.settings.target_flags import read_url
from exporter.sim.config import from_mapping
from exporter.stats.objectives import DECODE_TIERS, GoodputBounds, parse_objective
from exporter.stats.prefill import PrefillModel, dump_json
from exporter.streams.request import Timeouts

MINIMAL = "targets:\n  - name: a\n    url: http://127.0.0.1:8000/\n"


def test_minimal_config_gets_every_default() -> None:
    config = parse_config(MINIMAL, environ={})
    assert config.global_ == GlobalConfig()
    assert config.global_.listen_address == "0.0.0.0:9468"
    assert config.global_.windows_s == (300.0, 3600.0)
    assert config.global_.max_results_per_window == 2000
    (target,) = config.targets
    assert target.url == "http://127.0.0.1:8000"  # trailing slash dropped
    assert target.api == "chat" and target.model is None and target.api_key is None
    assert target.timeouts == Timeouts() and target.budget == Budget() and target.slo == "default"
    assert target.modules == () and config.probes() == ()
    assert list(config.slos) == ["default"] and config.slos["default"] == Slo()


def test_module_defaults_and_all_modules_by_default() -> None:
    config = parse_config(MINIMAL + "modules:\n  one:\n  two: {requests_per_run: 3}\n", environ={})
    assert config.targets[0].modules == ("one", "two")
    one = config.module("one")
    assert one.concurrency == 1 and one.arrival is None and one.requests_per_run == 2
    assert one.schedule == ProbeSchedule(interval_s=30.0, jitter_s=0.0, cron=None)
    assert one.workload.prompt_tokens == LogNormal(512, 0.5) and one.workload.output_tokens == Fixed(128)
    assert [m.name for _, m in config.probes()] == ["one", "two"]


FULL = """
global:
  listen_address: ":9100"
  windows: [1m, 1h30m]
  buckets: {ttft: [0.1, 1, 10], fluidity: [0.5, 0.9, 1]}
targets:
  - name: gpu-0
    url: https://llm.example:8443/openai
    api: completions
    model: llama
    headers: {X-Team: llm}
    extra_body: {top_p: 0.9, stop: ["\\n"]}
    timeouts: {connect: 2s, ttft: 250ms, idle: null, total: 5m}
    engine_metrics: {url: "http://llm.example:9000/metrics", kind: vllm, interval: 5s}
    modules: [chat]
    slo: tight
    budget: {max_requests_per_hour: 720, max_tokens_per_hour: 2000000, max_backoff: 1h}
modules:
  chat:
    workload: sharegpt
    max_output_tokens: 256
    requests_per_run: 4
    arrival: {kind: gamma, rate: 2, shape: 0.5}
    schedule: {cron: "*/5 * * * *", jitter: 10s}
  open:
    arrival: poisson:rate=2
slos:
  tight:
    prefill: {deadline: 500ms}
    decode_tiers: {medium: 50ms}
    target_fluidity: 0.95
    percentile: 95
    objectives: ["ttft:p99<=2", "fluidity:p99>=0.9"]
    goodput: {ttft: 2s, tpot: 100ms, min_fluidity: 0.9}
"""


def test_full_config_reads_every_section() -> None:
    config = parse_config(FULL, environ={})
    assert config.global_.listen_address == ":9100"
    assert config.global_.windows_s == (60.0, 5400.0)
    assert config.global_.buckets.ttft == (0.1, 1.0, 10.0) and config.global_.buckets.tbt is None
    target = config.target("gpu-0")
    assert target.timeouts == Timeouts(connect=2.0, ttft=0.25, idle=None, total=300.0)
    assert target.engine_metrics is not None and target.engine_metrics.interval_s == 5.0
    assert target.budget == Budget(720, 2_000_000, 3, 3600.0)
    settings = target.client
    assert settings.base_url == "https://llm.example:8443/openai" and settings.api == "completions"
    assert settings.headers == (("X-Team", "llm"),)
    assert dict(settings.extra_body) == {"top_p": 0.9, "stop": ["\n"]}
    chat = config.module("chat")
    assert chat.arrival == Gamma(2.0, 0.5) and chat.concurrency is None
    assert chat.schedule == ProbeSchedule(interval_s=None, jitter_s=10.0, cron="*/5 * * * *")
    assert config.module("open").arrival == Poisson(2.0)


def test_slo_helpers_build_the_report_objects() -> None:
    config = parse_config(FULL, environ={})
    slo = config.slo_for("gpu-0")
    assert DeadlinePolicy.of(slo) == DeadlinePolicy(
        prefill_deadline=0.5, decode_tiers={"medium": 0.05}, target_fluidity=0.95, percentile=95.0
    )
    spec = EvaluationSpec.of(slo)
    assert spec.slos == (parse_objective("ttft:p99<=2"), parse_objective("fluidity:p99>=0.9"))
    assert spec.goodput == GoodputBounds(ttft=2.0, tpot=0.1, min_fluidity=0.9)
    default = DeadlinePolicy.of(config.slos["default"])
    assert default.prefill_deadline == 1.0 and dict(default.decode_tiers) == dict(DECODE_TIERS)


def test_prefill_model_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    model = PrefillModel((0.01, 1e-4, 0.0), (16.0, 4096.0), 40, 0.002)
    (tmp_path / "prefill.json").write_text(dump_json(model), encoding="utf-8")
    path = tmp_path / "c.yaml"
    slo = "slos:\n  default:\n    prefill: {model_file: prefill.json, scheduling_slack: 250ms}\n"
    path.write_text(MINIMAL + slo, encoding="utf-8")
    policy = DeadlinePolicy.of(load_config(path, environ={}).slos["default"])
    assert policy.prefill_model == model and policy.scheduling_slack == 0.25


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 50_000 + "]" * 50_000, "nested 50000 levels deep; at most 32 are read"),
        (
            dump_json(PrefillModel((0.01, 1e-4, 0.0), (16.0, 4096.0), 40, 0.002)).replace("0.002", "1e999"),
            "1e999 is not a finite number",
        ),
    ],
)
def test_a_prefill_model_file_is_read_bounded_like_a_state_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    """A deeply nested model file raised RecursionError from the config reader, which named no field."""
    (tmp_path / "prefill.json").write_text(text, encoding="utf-8")
    path = tmp_path / "c.yaml"
    path.write_text(
        MINIMAL + "slos:\n  default:\n    prefill: {model_file: prefill.json}\n", encoding="utf-8"
    )
    with pytest.raises(SettingsError) as raised:
        load_config(path, environ={})
    model = tmp_path / "prefill.json"
    assert str(raised.value).endswith(
        f"slos.default.prefill.model_file: cannot read the prefill model file {model}: {problem}"
    )


def test_workload_uses_exact_prompts_only_for_the_simulator() -> None:
    config = parse_config(FULL.replace("workload: sharegpt", "workload: lmsys"), environ={})
    real = config_workload(config, "gpu-0", "chat")
    assert isinstance(real.builder, ApproxPromptBuilder) and real.api == "completions"
    assert real.name == "lmsys" and real.max_output_tokens == 256
    simulated = parse_config(MINIMAL + "    simulated: true\nmodules:\n  m: {}\n", environ={})
    workload = config_workload(simulated, "a", "m")
    assert isinstance(workload.builder, SimPromptBuilder) and workload.prompt_tokens_exact
    assert workload.name == "m" and workload.api == "chat"


def test_unknown_names_list_the_valid_ones() -> None:
    config = parse_config(FULL, environ={})
    with pytest.raises(UnknownNameError, match=r'unknown target "gpu-1"; valid: gpu-0'):
        config.target("gpu-1")
    with pytest.raises(UnknownNameError, match=r'unknown module "chatt"; valid: chat, open'):
        config.module("chatt")


def test_default_config_probes_the_simulator() -> None:
    config = default_config("http://127.0.0.1:40123/")
    (target,) = config.targets
    assert target.simulated and target.name == "sim" and target.url == "http://127.0.0.1:40123"
    (pair,) = config.probes()
    module = pair[1]
    assert module.name == "default" and module.concurrency == 1 and module.requests_per_run == 2
    assert module.schedule == ProbeSchedule(interval_s=15.0, jitter_s=3.0)
    workload = config_workload(config, "sim", "default")
    assert isinstance(workload.builder, SimPromptBuilder)
    assert module.workload.prompt_tokens == LogNormal(512, 0.5) and module.workload.output_tokens == Fixed(
        128
    )


def test_configs_compare_by_value_so_a_reload_can_tell_what_changed() -> None:
    first, second = parse_config(FULL, environ={}), parse_config(FULL, environ={})
    assert first == second and first.module("chat") == second.module("chat")
    changed = parse_config(FULL.replace("requests_per_run: 4", "requests_per_run: 5"), environ={})
    assert changed != first and changed.module("chat") != first.module("chat")
    assert changed.module("open") == first.module("open")


def test_config_is_frozen() -> None:
    config = parse_config(MINIMAL, environ={})
    with pytest.raises(AttributeError):
        config.targets = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.slos["x"] = Slo()  # type: ignore[index]


# --- ${ENV} expansion --------------------------------------------------------------------------------


def test_env_expansion_with_values_and_defaults() -> None:
    text = """
global: {listen_address: "${HOST:-0.0.0.0}:${PORT:-9468}", max_results_per_window: "${KEEP}"}
targets:
  - name: ${NAME}
    url: http://${UPSTREAM}:8000
    model: ${MODEL:-}
    tls: {verify: "${VERIFY:-true}"}
    headers: {X-Cost: "$$5"}
"""
    config = parse_config(
        text, environ={"PORT": "9100", "KEEP": "50", "NAME": "a", "UPSTREAM": "gpu", "VERIFY": "false"}
    )
    assert config.global_.listen_address == "0.0.0.0:9100"
    assert config.global_.max_results_per_window == 50  # an expanded value reads as a YAML scalar
    target = config.targets[0]
    assert target.name == "a" and target.url == "http://gpu:8000"
    assert target.model is None  # empty expansion: null
    assert target.tls.verify is False
    assert target.headers == (("X-Cost", "$5"),)


def test_env_expansion_reports_every_unset_variable() -> None:
    text = "targets:\n  - name: ${N1}\n    url: ${U1}\n    model: ${M1}\n"
    with pytest.raises(SettingsError) as caught:
        parse_config(text, environ={})
    assert caught.value.problems == [
        f"targets[0].{key}: environment variable {var} is not set (write ${{{var}:-default}} to give a default)"
        for key, var in (("name", "N1"), ("url", "U1"), ("model", "M1"))
    ]


def test_env_expansion_uses_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUIDITY_TEST_URL", "http://10.0.0.9:8000")
    config = parse_config("targets:\n  - name: a\n    url: ${FLUIDITY_TEST_URL}\n")
    assert config.targets[0].url == "http://10.0.0.9:8000"


# --- secrets -----------------------------------------------------------------------------------------

SECRET = "sk-abc123-very-secret"


def test_secret_from_env_is_resolved_and_never_printed() -> None:
    config = parse_config(
        MINIMAL + "    api_key: {env: OPENAI_API_KEY}\n", environ={"OPENAI_API_KEY": SECRET}
    )
    key = config.targets[0].api_key
    assert key is not None and key.reveal() == SECRET
    assert config.targets[0].client.api_key == key
    for text in (repr(config), str(config), repr(config.targets[0]), str(key), f"{config.targets}"):
        assert SECRET not in text
    assert "********" in repr(config.targets[0])
    assert pickle.loads(pickle.dumps(key)).reveal() == SECRET  # worker processes still get it


def test_secret_from_file_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(SECRET + "\n", encoding="utf-8")
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + "    api_key: {file: key}\n", encoding="utf-8")
    config = load_config(str(path), environ={})
    key = config.targets[0].api_key
    assert key is not None and key.reveal() == SECRET and SECRET not in repr(config)


def test_the_config_names_every_secret_file_it_read_once(tmp_path: Path) -> None:
    """What the config watch re-reads: each {file:} once, relative paths resolved; no {env:}."""
    for name in ("key", "token"):
        (tmp_path / name).write_text(SECRET + "\n", encoding="utf-8")
    path = tmp_path / "c.yaml"
    path.write_text(
        "global: {probe_token: {env: PROBE}}\n"
        "targets:\n"
        "  - {name: a, url: http://127.0.0.1:8000/, api_key: {file: key}}\n"
        f"  - {{name: b, url: http://127.0.0.1:8001/, api_key: {{file: {tmp_path / 'key'}}},\n"
        f"     gateway_metrics: {{url: http://epp:9090/metrics, kind: llm-d-epp, bearer_token: {{file: token}}}}}}\n",
        encoding="utf-8",
    )
    config = load_config(str(path), environ={"PROBE": "p"})
    assert config.secret_files == (str(tmp_path / "key"), str(tmp_path / "token"))
    assert parse_config(MINIMAL, environ={}).secret_files == ()


def test_header_values_stay_out_of_the_repr() -> None:
    config = parse_config(MINIMAL + "    headers: {X-Api-Key: hidden-value}\n", environ={})
    assert "hidden-value" not in repr(config)


def test_literal_key_error_does_not_echo_it() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_config(MINIMAL + f"    api_key: {SECRET}\n", environ={})
    assert SECRET not in str(caught.value) and "write {env: NAME} or {file: PATH}" in str(caught.value)


# --- several problems at once -------------------------------------------------------------------------


def test_a_file_with_many_problems_reports_them_all_in_order() -> None:
    text = """
global: {windows: [], colour: blue}
targets:
  - name: a
    url: http://h:8000
    modules: [chatt]
  - name: a
    url: ftp://h
    api_key: {env: MISSING_KEY}
    slo: nope
modules:
  chat:
    arrival: burst
    schedule: {interval: soon}
slos:
  default:
    percentile: 101
"""
    with pytest.raises(SettingsError) as caught:
        parse_config(text, environ={})
    assert caught.value.problems == [
        'global: unknown key "colour"; valid: buckets, jobs_listen_address, listen_address, max_results_per_window, probe_token, state_dir, windows',
        "global.windows: must list at least one window, e.g. [5m, 1h]",
        'targets[0].modules[0]: unknown module "chatt"; valid: chat',
        'targets[1].name: duplicate target name "a" (also targets[0])',
        'targets[1].url: must be an http(s) URL like http://host:8000, got "ftp://h"',
        "targets[1].api_key.env: environment variable MISSING_KEY is not set or empty (it should hold the API key)",
        'targets[1].slo: unknown slo "nope"; valid: default',
        'modules.chat.arrival: unknown arrival process "burst"; valid: constant, gamma, poisson',
        'modules.chat.schedule.interval: bad duration "soon"; use seconds (a number) or a number with a unit: '
        "ms, s, m, h, d (e.g. 250ms, 30s, 5m, 1h)",
        "slos.default.percentile: must be a number in (0, 100], got 101",
    ]
    assert str(caught.value).count("\n") == len(caught.value.problems) - 1


def test_load_config_tells_a_path_from_text(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    assert (
        load_config(str(path), environ={})
        == load_config(MINIMAL, environ={})
        == load_config(path, environ={})
    )
    assert load_config(path, environ={}).source == str(path)
    with pytest.raises(SettingsError, match=r"cannot read the config file"):
        load_config(str(tmp_path / "missing.yaml"))


# --- durations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(30, 30.0), (0.25, 0.25), ("250ms", 0.25), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1h30m", 5400.0),
     ("1.5s", 1.5), ("2d", 172800.0), ("0s", 0.0)],
)  # fmt: skip
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "5", "5 s", "s", "-1s", "1x", "1h-5m", True, None, [1], float("nan"), -1]
)
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@given(st.integers(0, 10**6), st.sampled_from(["ms", "s", "m", "h"]))
def test_duration_units_scale(number: int, unit: str) -> None:
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
    assert parse_duration(f"{number}{unit}") == pytest.approx(number * scale)


def test_config_constructed_in_code_fills_the_default_slo() -> None:
    config = Config(GlobalConfig(), (Target("a", "http://h"),), {}, {})
    assert config.slo_for("a") == Slo()


NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_characters="$}", blacklist_categories=("Cs",)), max_size=12)


@given(NAMES, VALUES, VALUES)
def test_expansion_substitutes_values_and_defaults(name: str, value: str, default: str) -> None:
    problems = Problems()
    tree = {"a": f"<${{{name}}}>", "b": f"${{{name}:-{default}}}", "c": "$$x", "d": "plain"}
    expanded = expand_env(tree, {name: value}, problems)
    assert not problems
    assert expanded == {"a": f"<{value}>", "b": value or default, "c": "$x", "d": "plain"}
    unset = expand_env(tree, {}, problems)
    assert unset["b"] == default and len(problems.items) == 1


def test_trace_workload_is_read_at_load_time_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl").write_text(
        '{"prompt_tokens": 100, "output_tokens": 20}\n{"prompt_tokens": 300, "output_tokens": 40}\n'
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "targets: [{name: a, url: 'http://127.0.0.1:1'}]\n"
        "modules: {replay: {workload: {trace: trace.jsonl, format: jsonl}}}\n"
    )
    config = load_config(config_file)
    workload = config_workload(config, "a", "replay")
    prompts, outputs = workload.sample_lengths(200, np.random.default_rng(0))
    assert set(zip(prompts.tolist(), outputs.tolist(), strict=True)) == {(100, 20), (300, 40)}  # pairs kept
    assert "trace.jsonl (2 pairs)" in config.module("replay").workload.describe()


def test_bad_trace_workloads_name_the_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(
        '{"prompt_tokens": 100, "output_tokens": 20}\n{"prompt_tokens": -1}\n'
    )
    text = "targets: [{name: a, url: 'http://127.0.0.1:1'}]\nmodules:\n"
    text += "  m1: {workload: {trace: bad.jsonl, format: jsonl}}\n"
    text += "  m2: {workload: {trace: bad.jsonl, format: csv}}\n"
    text += "  m3: {workload: {trace: missing.jsonl, format: jsonl, prompt_tokens: 5}}\n"
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_config(tmp_path / "c.yaml")
    problems = caught.value.problems
    assert any(p.startswith("modules.m1.workload.trace: ") and "bad.jsonl:2" in p for p in problems), problems
    assert any(
        p.startswith("modules.m2.workload.format: ") and "valid: azure, jsonl, mooncake, sharegpt" in p
        for p in problems
    ), problems
    assert any("give either trace (with format) or prompt_tokens/output_tokens" in p for p in problems), (
        problems
    )


JOBS = """targets:
  - name: local-vllm
    url: http://127.0.0.1:8000
    modules: [chat-short]
modules:
  chat-short: {}
  code: {}
jobs:
  api_token: {env: JOBS_TOKEN}
  limits: {max_rate: 10, max_concurrency: 32, max_duration: 30m, max_tokens: 1000000, max_trials: 6,
           max_requests_per_trial: 500, max_prompt_tokens: 8192}
  history: 50
  schedules:
    - name: nightly-capacity
      kind: capacity
      cron: "0 3 * * *"
      params: {target: local-vllm, module: chat-short, trial_duration_s: 2m, slo: {decode_tier: strict}}
    - name: weekly-profile
      kind: prefill-profile
      cron: "0 2 * * 0"
      params: {target: "${PROFILE_TARGET:-local-vllm}"}
"""


def test_jobs_section_is_read_with_its_limits_and_schedules() -> None:
    config = parse_config(JOBS, environ={"JOBS_TOKEN": "jobs-s3cret"})
    jobs = config.jobs
    assert jobs.api_token is not None and jobs.api_token.reveal() == "jobs-s3cret"
    assert "jobs-s3cret" not in repr(config)
    assert jobs.limits == JobLimits(
        max_rate=10.0,
        max_concurrency=32,
        max_duration_s=1800.0,
        max_tokens=1_000_000,
        max_trials=6,
        max_requests_per_trial=500,
        max_prompt_tokens=8192,
    )
    assert jobs.history == 50
    capacity, profile = jobs.schedules
    assert (capacity.name, capacity.kind, capacity.cron) == ("nightly-capacity", "capacity", "0 3 * * *")
    assert capacity.params == CapacityParams(
        target="local-vllm",
        module="chat-short",
        max_trials=6,  # the default (8) lowered to the configured limit
        trial_duration_s=120.0,
        slo=SloSpec(decode_tier="strict"),
    )
    assert capacity.params_dict == params_to_dict(capacity.params)
    # The default ladder stops at the configured longest prompt.
    assert profile.params == ProfileParams(
        target="local-vllm", lengths=(128, 256, 512, 1024, 2048, 4096, 8192)
    )


def test_without_a_jobs_section_the_jobs_api_is_off_and_nothing_is_scheduled() -> None:
    config = parse_config(MINIMAL, environ={})
    assert config.jobs == JobsConfig()
    assert config.jobs.api_token is None and config.jobs.schedules == ()
    assert config.jobs.limits == JobLimits()
    assert parse_config(MINIMAL + "jobs:\n", environ={}).jobs == JobsConfig()


def test_a_schedule_change_is_a_config_change() -> None:
    before = parse_config(JOBS, environ={"JOBS_TOKEN": "t"})
    after = parse_config(
        JOBS.replace("decode_tier: strict", "decode_tier: relaxed"), environ={"JOBS_TOKEN": "t"}
    )
    assert before == parse_config(JOBS, environ={"JOBS_TOKEN": "t"})
    assert before != after


def test_gateway_metrics_with_a_bearer_token_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("k8s-sa-token\n")
    text = (
        "targets:\n  - name: a\n    url: http://h:8000\n"
        "    engine_metrics: {url: http://h:8000/metrics}\n"
        f"    gateway_metrics: {{url: http://epp:9090/metrics, kind: llm-d-epp, interval: 5s, model: llama,"
        f" bearer_token: {{file: {token}}}}}\n"
    )
    target = parse_config(text, environ={}).target("a")
    gateway = target.gateway_metrics
    assert gateway is not None
    assert (gateway.kind, gateway.interval_s, gateway.model) == ("llm-d-epp", 5.0, "llama")
    assert gateway.headers() == {"Authorization": "Bearer k8s-sa-token"}
    assert "k8s-sa-token" not in repr(target)
    assert target.engine_metrics is not None and target.engine_metrics.headers() == {}


@pytest.mark.parametrize(
    "written", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"]
)
def test_a_target_url_has_one_rule_in_the_config_the_shards_and_the_flags(written: str) -> None:
    """A trailing /v1 (an OpenAI client's base URL) is taken and left out wherever a target's URL is
    given: the config refused it while --url took it."""
    config = parse_config(
        f"targets:\n  - {{name: a, url: '{written}'}}\n"
        f"jobs:\n  api_token: {{env: KEY}}\n  shards: {{count: 2, target_urls: {{a: '{written}'}}}}\n",
        environ={"KEY": "k"},
    )
    assert config.targets[0].url == "http://h:8000"
    assert config.jobs.shards is not None and config.jobs.shards.url_for("a") == "http://h:8000"
    assert read_url(written) == "http://h:8000"
    assert check_target_url("http://v1") == "http://v1"  # a host named v1 is no path
    assert check_target_url("https://api.example/openai/v1") == "https://api.example/openai"


def test_every_reader_of_settings_raises_the_one_error_with_each_field_path() -> None:
    """The daemon's YAML, a jobs API request, a flag and the simulator's options: one error type."""
    with pytest.raises(SettingsError) as from_yaml:
        parse_config("targets: [{name: a, url: 'ftp://h'}]\n", environ={})
    with pytest.raises(SettingsError) as from_json:
        parse_params("capacity", {"target": "a", "max_trials": 0}, JobLimits())
    with pytest.raises(SettingsError) as from_flag:
        read_url("ftp://h")
    with pytest.raises(SettingsError) as from_sim:
        from_mapping({"port": "eighty"})
    assert [problem.path for problem in from_yaml.value.problems] == ["targets[0].url"]
    assert [problem.path for problem in from_json.value.problems] == ["max_trials"]
    assert from_flag.value.problems == ['--url: must be an http(s) URL like http://host:8000, got "ftp://h"']
    assert len(from_sim.value.problems) == 1 and from_sim.value.problems[0].startswith("port:")
