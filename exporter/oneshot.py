"""``fluidity-exporter bench``: a one-shot black-box evaluation of an endpoint, as Etalon does it.

Sends a workload (a named preset or a trace) to ``--url`` (by default to the built-in simulator,
started in a child process so it has its own core), open-loop at ``--rate`` or closed-loop at
``--concurrency``, for ``--requests`` or ``--duration``; shows live TTFT/TBT/fluidity while it runs;
then prints the summary tables and writes the output directory (``requests.jsonl``, ``summary.json``,
a CSV per metric, and plots with the ``plots`` extra). ``--json`` prints the summary for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import yaml

from exporter.cli import EXIT_FAILED, EXIT_MEASURED, EXIT_USAGE, Command
from exporter.evaluation import DeadlinePolicy, EvaluationSpec, measure
from exporter.load.arrivals import ArrivalProcess, offsets_within, parse_arrival_spec
from exporter.load.calibration import Calibration, calibrate_prompts, max_model_len
from exporter.load.cpus import available_cpus
from exporter.load.distributions import parse_length_spec
from exporter.load.presets import PRESET_NAMES, preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.runner import LoadRun, load_run_from_results, run_load
from exporter.load.sessions import DEFAULT_THINK_TIME, parse_think_time, session_turns
from exporter.load.shard_local import local_shards
from exporter.load.traces import (
    TRACE_FORMATS,
    load_trace,
    trace_arrivals,
    trace_specs,
    trace_turns,
    trace_workload,
)
from exporter.load.workloads import IndependentLengths, Workload
from exporter.probe import loop as event_loop
from exporter.probe.client import ProbeClient
from exporter.probe.http import HttpError
from exporter.probe.result import ProbeResult, intervals
from exporter.probe.target import APIS, Api, RequestSpec, Secret, TargetSettings, Timeouts
from exporter.report.files import write_outputs
from exporter.report.summary import summarize
from exporter.report.table import render_summary
from exporter.sim.presets import PRESETS as SIM_PRESETS
from exporter.sim.process import SimProcess
from exporter.stats.fluidity import fluidity_index
from exporter.stats.prefill import parse_json
from exporter.stats.slo import DECODE_TIERS, GoodputBounds, parse_slo

ARRIVALS = ("poisson", "gamma", "constant")
DEFAULT_SIM_PRESET = "llama-3.1-8b-h100"
DEFAULT_RATE = 4.0  # requests per second when neither --rate nor --concurrency is given


class BenchError(Exception):
    """A bad flag or file: the message names it and the valid options."""


# -- flags ------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``bench``; every one can also be a key of the ``--config`` YAML file (flags win)."""
    add_target_arguments(parser)
    _add_load_arguments(parser)


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """How to reach the endpoint (shared by ``bench`` and ``profile``)."""
    target = parser.add_argument_group("target")
    target.add_argument(
        "--url", help="base URL of an OpenAI-compatible server (default: start the simulator)"
    )
    target.add_argument("--api", choices=APIS, help="chat, completions or responses (default chat)")
    target.add_argument("--model", help="model name (default: the first of /v1/models)")
    target.add_argument("--api-key-env", help="environment variable holding the API key")
    target.add_argument("--api-key-file", help="file holding the API key")
    target.add_argument("--header", action="append", metavar="NAME:VALUE", help="extra request header")
    target.add_argument("--extra-body", metavar="JSON", help="JSON object merged into every request body")
    target.add_argument("--ca-file", help="CA bundle for TLS verification")
    target.add_argument("--insecure", action="store_true", default=None, help="do not verify TLS")
    target.add_argument("--sim-preset", help=f"simulator preset when no --url (default {DEFAULT_SIM_PRESET})")
    target.add_argument("--ttft-timeout", type=float, help="seconds to the first token (default 60)")
    target.add_argument("--idle-timeout", type=float, help="longest silence mid-stream, seconds (default 30)")
    target.add_argument("--total-timeout", type=float, help="seconds per request (default 600)")
    target.add_argument(
        "--no-calibrate",
        action="store_true",
        default=None,
        help="do not calibrate prompts to the server's token counts (3 requests before the load)",
    )


def _add_session_arguments(load: argparse._ArgumentGroup) -> None:
    """Multi-turn sessions, tool calls and structured output."""
    load.add_argument(
        "--turns",
        help="turns per session: N, a distribution (uniform:low=2,high=6) or trace (a conversation "
        "trace's own turns); default 1, the mooncake preset 1-5",
    )
    load.add_argument(
        "--think-time", help=f"seconds between turns, e.g. fixed:2 (default {DEFAULT_THINK_TIME})"
    )
    load.add_argument(
        "--tool-calls", action="store_true", default=None, help="ask for tool calls instead of text"
    )
    load.add_argument("--response-format", metavar="JSON", help="structured output: a response_format object")


def _add_load_arguments(parser: argparse.ArgumentParser) -> None:
    load = parser.add_argument_group("load")
    load.add_argument("--workload", help=f"preset: {', '.join(PRESET_NAMES)} (default sharegpt)")
    load.add_argument("--trace", help="a trace file to replay (lengths and, with --arrival trace, times)")
    load.add_argument("--trace-format", help=f"format of --trace: {', '.join(TRACE_FORMATS)}")
    load.add_argument("--prompt-tokens", help="custom prompt lengths instead of a preset, e.g. fixed:512")
    load.add_argument("--output-tokens", help="custom output lengths, e.g. uniform:low=64,high=256")
    load.add_argument("--max-prompt-tokens", type=int, help="filter: longest prompt (default per preset)")
    load.add_argument("--max-output-tokens", type=int, help="filter: longest output (default per preset)")
    _add_session_arguments(load)
    load.add_argument(
        "--rate",
        type=float,
        help=f"requests (with --turns: sessions) per second, open loop (default {DEFAULT_RATE:g})",
    )
    load.add_argument("--arrival", help=f"arrival process: {', '.join(ARRIVALS)}, trace (default poisson)")
    load.add_argument("--burstiness", type=float, help="gamma shape (1 = Poisson; < 1 burstier)")
    load.add_argument("--concurrency", type=int, help="closed loop: requests in flight")
    load.add_argument("--requests", type=int, help="number of requests (default 100)")
    load.add_argument("--duration", type=float, help="seconds of load (instead of --requests)")
    load.add_argument("--workers", type=int, help="client processes for heavy open loads (default 1)")
    load.add_argument(
        "--from-scheduled", action="store_true", default=None, help="latency from scheduled send"
    )
    load.add_argument(
        "--seed",
        type=int,
        help="random seed of lengths and arrivals (default 0; prompt texts are new every run)",
    )
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--prefill-deadline", type=float, help="constant Dp in seconds (default 1.0)")
    evaluation.add_argument("--prefill-model", help="a profiled prefill model (JSON) for Dp(prompt length)")
    evaluation.add_argument("--scheduling-slack", type=float, help="added to the model's Dp (default 0)")
    evaluation.add_argument(
        "--decode-tiers", help="name=seconds,... (default strict=0.025,medium=0.05,relaxed=0.1)"
    )
    evaluation.add_argument(
        "--target-fluidity", type=float, help="fluidity a request must reach (default 0.9)"
    )
    evaluation.add_argument(
        "--fluid-percentile", type=float, help="share of requests for the fluid rate (99)"
    )
    evaluation.add_argument(
        "--slo", action="append", help="e.g. ttft:p99<=2 or fluidity:p99>=0.9 (repeatable)"
    )
    evaluation.add_argument("--goodput", help="per-request bounds, e.g. ttft<=2,tpot<=0.1,min_fluidity>=0.9")
    output = parser.add_argument_group("output")
    output.add_argument("--output", help="directory for the report files (default bench-results/<time>)")
    output.add_argument(
        "--plots", action="store_true", default=None, help="also write PNG plots (plots extra)"
    )
    output.add_argument("--json", action="store_true", default=None, help="print summary.json to stdout")
    output.add_argument("--quiet", action="store_true", default=None, help="no progress line")
    parser.add_argument("--config", help="YAML file whose keys are these flags' names (e.g. rate: 5)")


def merged_options(args: argparse.Namespace) -> dict[str, Any]:
    """Flags over the ``--config`` file's keys (dashes or underscores); unknown keys are errors."""
    flags = {key: value for key, value in vars(args).items() if key not in ("command", "config")}
    if not args.config:
        return flags
    try:
        loaded = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BenchError(f"--config {args.config}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise BenchError(f"--config {args.config}: expected a mapping of flag names to values")
    from_file = {str(key).replace("-", "_"): value for key, value in loaded.items()}
    unknown = sorted(set(from_file) - set(flags))
    if unknown:
        valid = ", ".join(sorted(key.replace("_", "-") for key in flags))
        raise BenchError(f'--config {args.config}: unknown key "{unknown[0]}"; valid: {valid}')
    return {key: flags[key] if flags[key] is not None else from_file.get(key) for key in flags}


# -- building the pieces from options (pure apart from reading named files) -------------------------


def target_settings(options: dict[str, Any], url: str) -> TargetSettings:
    """How to reach the target."""
    timeouts = Timeouts(
        ttft=options["ttft_timeout"] or Timeouts.ttft,
        idle=options["idle_timeout"] or Timeouts.idle,
        total=options["total_timeout"] or Timeouts.total,
    )
    return TargetSettings(
        base_url=url,
        api=_api(options),
        model=options["model"],
        api_key=_api_key(options),
        headers=tuple(_header(h) for h in options["header"] or ()),
        extra_body=tuple(_extra_body(options["extra_body"]).items()),
        timeouts=timeouts,
        verify_tls=not options["insecure"],
        ca_file=options["ca_file"],
    )


def _api_key(options: dict[str, Any]) -> Secret | None:
    try:
        if options["api_key_env"]:
            return Secret.from_env(options["api_key_env"])
        if options["api_key_file"]:
            return Secret.from_file(options["api_key_file"])
    except ValueError as exc:
        raise BenchError(str(exc)) from exc
    return None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise BenchError(f'--header "{text}": expected NAME:VALUE')
    return name.strip(), value.strip()


def _extra_body(text: str | dict[str, Any] | None) -> dict[str, Any]:
    if text is None or isinstance(text, dict):
        return dict(text or {})
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchError(f"--extra-body: not valid JSON ({exc.msg})") from exc
    if not isinstance(body, dict):
        raise BenchError("--extra-body: expected a JSON object")
    return body


def evaluation_spec(options: dict[str, Any]) -> EvaluationSpec:
    """Deadlines, SLOs and goodput bounds."""
    deadlines = DeadlinePolicy(
        prefill_deadline=options["prefill_deadline"] or DeadlinePolicy.prefill_deadline,
        prefill_model=prefill_model_file(options["prefill_model"]),
        scheduling_slack=options["scheduling_slack"] or 0.0,
        decode_tiers=_tiers(options["decode_tiers"]),
        target_fluidity=options["target_fluidity"] or 0.9,
        percentile=options["fluid_percentile"] or 99.0,
    )
    try:
        slos = tuple(parse_slo(text) for text in options["slo"] or ())
    except ValueError as exc:
        raise BenchError(f"--slo: {exc}") from exc
    return EvaluationSpec(deadlines, slos, _goodput(options["goodput"]), bool(options["from_scheduled"]))


def prefill_model_file(path: str | None) -> Any:
    if not path:
        return None
    try:
        return parse_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"--prefill-model {path}: {exc}") from exc


def _tiers(text: str | dict[str, float] | None) -> dict[str, float]:
    if text is None:
        return dict(DECODE_TIERS)
    pairs = text.items() if isinstance(text, dict) else (item.partition("=")[::2] for item in text.split(","))
    tiers: dict[str, float] = {}
    for name, value in pairs:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise BenchError(f'--decode-tiers: "{name}={value}" needs seconds, e.g. medium=0.05') from None
        if not seconds > 0:
            raise BenchError(f"--decode-tiers: {name} must be > 0 seconds, got {value}")
        tiers[str(name).strip()] = seconds
    return tiers


GOODPUT_KEYS = ("ttft", "tpot", "e2e", "max_tbt", "normalized_latency", "min_fluidity")


def _goodput(text: str | None) -> GoodputBounds | None:
    if not text:
        return None
    bounds: dict[str, float] = {}
    for item in text.split(","):
        name, _, value = item.replace(">=", "<=").partition("<=")
        if name.strip() not in GOODPUT_KEYS:
            raise BenchError(f'--goodput: unknown bound "{name.strip()}"; valid: {", ".join(GOODPUT_KEYS)}')
        try:
            bounds[name.strip()] = float(value)
        except ValueError:
            raise BenchError(f'--goodput: "{item}" needs a number, e.g. ttft<=2') from None
    return GoodputBounds(**bounds)


@dataclasses.dataclass(frozen=True)
class LoadPlan:
    """What to send and when: specs with open-loop offsets, or a closed-loop concurrency."""

    specs: list[RequestSpec] | Iterator[RequestSpec]
    offsets: np.ndarray | None
    concurrency: int | None
    rate: float | None
    duration: float | None
    prompt_tokens_exact: bool
    description: str


@dataclass(frozen=True)
class TargetFacts:
    """What the target said about itself before the load: its context length (``max_model_len`` from
    ``/v1/models``, when it says) and how it counts our prompts (None: exact prompts, the simulator)."""

    context: int | None = None
    calibration: Calibration | None = None

    def describe(self) -> list[str]:
        lines = [self.calibration.describe()] if self.calibration is not None else []
        if self.context is not None:
            lines.append(
                f"context: the server serves {self.context} tokens (max_model_len); requests fit in it"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        calibration = self.calibration
        return {
            "max_model_len": self.context,
            "prompt_calibration": None
            if calibration is None
            else {
                "tokens_per_word": calibration.tokens_per_word,
                "overhead_tokens": calibration.overhead_tokens,
                "residual": calibration.residual,
            },
        }


def skip_calibration(options: dict[str, Any], simulated: bool) -> bool:
    """The simulator's prompts are exact already; ``--no-calibrate`` keeps the server's counters to the
    measured load alone (the real-engine tests compare them with the report)."""
    return simulated or bool(options["no_calibrate"])


async def discover(settings: TargetSettings, exact_prompts: bool) -> TargetFacts:
    """Ask the target for its model, context length and prompt token counts (three 1-token requests
    calibrate our approximate prompts unless ``exact_prompts``)."""
    async with ProbeClient(settings) as client:
        await client.resolve_model()
        try:
            async with asyncio.timeout(settings.timeouts.connect or 10.0):
                status, body = await client.get("/models")
            context = max_model_len(body) if status == 200 else None
        except (TimeoutError, OSError, HttpError):
            context = None
        calibration = None if exact_prompts else await calibrate_prompts(client.send, settings.api)
    return TargetFacts(context, calibration)


def load_plan(options: dict[str, Any], simulated: bool, facts: TargetFacts | None = None) -> LoadPlan:
    """Requests and their schedule from the load flags."""
    rng = np.random.default_rng(options["seed"] or 0)
    workload = workload_from_options(options, simulated, facts)
    count, duration = options["requests"], options["duration"]
    if count is None and duration is None:
        count = 100
    if options["trace"]:
        return _trace_plan(options, workload, rng, count, duration)
    concurrency = options["concurrency"]
    if concurrency is not None and options["rate"] is not None:
        raise BenchError("--rate and --concurrency exclude each other: open loop or closed loop")
    exact, described = workload.prompt_tokens_exact, workload.describe()
    if concurrency is not None:
        # A closed loop refills as fast as requests end: with a duration, draw specs lazily.
        specs = _sample(workload, count, rng) if count else workload.stream(rng)
        return LoadPlan(specs, None, concurrency, None, duration, exact, described)
    process = _arrival(options)
    if workload.sessions and count:  # count requests in all; the arrivals start sessions
        specs = _sample(workload, count, rng)
        offsets = process.offsets(len(specs), rng)
        if duration is not None:
            offsets = offsets[offsets < duration]
        return LoadPlan(specs[: len(offsets)], offsets, None, process.rate, duration, exact, described)
    offsets = process.offsets(count, rng) if count else offsets_within(process, duration, rng)
    if count and duration is not None:
        offsets = offsets[offsets < duration]
    specs = _sample_units(workload, len(offsets), rng)
    return LoadPlan(specs, offsets, None, process.rate, duration, exact, f"{described}; {process.describe()}")


def _sample(workload: Workload, count: int, rng: np.random.Generator) -> list[RequestSpec]:
    try:
        return workload.sample(count, rng)
    except ValueError as exc:
        raise BenchError(str(exc)) from exc


def _sample_units(workload: Workload, count: int, rng: np.random.Generator) -> list[RequestSpec]:
    """``count`` sessions (or single requests): one per open-loop arrival."""
    try:
        return workload.sample_sessions(count, rng)
    except ValueError as exc:
        raise BenchError(str(exc)) from exc


def session_options(workload: Workload, options: dict[str, Any]) -> Workload:
    """``--turns``, ``--think-time``, ``--tool-calls`` and ``--response-format`` applied to ``workload``."""
    changes: dict[str, Any] = {}
    turns = options.get("turns")
    if turns is not None and str(turns).strip() != "trace":
        try:
            changes["turns"] = None if str(turns).strip() == "1" else parse_length_spec(turns)
        except ValueError as exc:
            raise BenchError(f"--turns: {exc}") from exc
    if options.get("think_time") is not None:
        try:
            changes["think_time"] = parse_think_time(options["think_time"])
        except ValueError as exc:
            raise BenchError(f"--think-time: {exc}") from exc
    if options.get("tool_calls"):
        if workload.api == "completions":
            raise BenchError("--tool-calls: needs --api chat or responses")
        changes["tool_calls"] = True
    if options.get("response_format") is not None:
        changes["extra_body"] = (
            ("response_format", _json_object(options["response_format"], "--response-format")),
        )
    session_turns_on = changes.get("turns", workload.turns) is not None or str(turns or "").strip() == "trace"
    if session_turns_on and changes.get("tool_calls", workload.tool_calls):
        raise BenchError(
            "--tool-calls and --turns above 1 exclude each other: a conversation would need tool results"
        )
    return dataclasses.replace(workload, **changes) if changes else workload


def _json_object(text: str | dict[str, Any], flag: str) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchError(f"{flag}: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise BenchError(f"{flag}: expected a JSON object")
    return value


def workload_from_options(
    options: dict[str, Any], simulated: bool, facts: TargetFacts | None = None
) -> Workload:
    """The workload the flags describe: a preset or custom lengths, fitted to the target's context
    (the simulator's, or the ``max_model_len`` the target reported), with calibrated prompts."""
    facts = facts or TargetFacts()
    builder: PromptBuilder = SimPromptBuilder() if simulated else ApproxPromptBuilder()
    if facts.calibration is not None:
        builder = facts.calibration.builder
    api = _api(options)
    limits = {
        "max_prompt_tokens": options["max_prompt_tokens"],
        "max_output_tokens": options["max_output_tokens"],
    }
    if options["prompt_tokens"] or options["output_tokens"]:
        if options["workload"]:
            raise BenchError("--workload and --prompt-tokens/--output-tokens exclude each other")
        workload = Workload("custom", _custom_lengths(options), builder, api, **limits)
    else:
        try:
            workload = preset(options["workload"] or "sharegpt", builder=builder, api=api, **limits)
        except ValueError as exc:
            raise BenchError(f"--workload: {exc}") from exc
    workload = session_options(workload, options)
    context = facts.context
    if context is None and simulated:
        context = SIM_PRESETS[options["sim_preset"] or DEFAULT_SIM_PRESET].engine.max_model_len
    return _fit_context(workload, options, context, exact=simulated)


def _fit_context(workload: Workload, options: dict[str, Any], context: int | None, exact: bool) -> Workload:
    """Keep prompt + output within the target's context (the presets allow 16K prompts; a server
    answers 400 beyond ``max_model_len``). Calibrated prompts keep a margin for their residual error."""
    if context is None or options["max_prompt_tokens"] is not None:
        return workload  # the user's filter wins, and a 400 for an over-long request is a finding
    if not exact:
        context = int(context * (1 - CONTEXT_MARGIN))
    output_cap = min(workload.max_output_tokens or context // 2, context // 2)
    return workload.with_options(max_prompt_tokens=context - output_cap, max_output_tokens=output_cap)


# Calibrated prompts come out within a few percent of the asked length: keep that much of the context free.
CONTEXT_MARGIN = 0.03


def _api(options: dict[str, Any]) -> Api:
    api = options["api"] or "chat"
    if api not in APIS:
        raise BenchError(f'--api: unknown api "{api}"; valid: {", ".join(APIS)}')
    return cast(Api, api)


def _custom_lengths(options: dict[str, Any]) -> IndependentLengths:
    specs = {
        "--prompt-tokens": options["prompt_tokens"] or 512,
        "--output-tokens": options["output_tokens"] or 128,
    }
    lengths = {}
    for flag, spec in specs.items():
        try:
            lengths[flag] = parse_length_spec(spec)
        except ValueError as exc:
            raise BenchError(f"{flag}: {exc}") from exc
    return IndependentLengths(lengths["--prompt-tokens"], lengths["--output-tokens"])


def _arrival(options: dict[str, Any]) -> ArrivalProcess:
    kind = options["arrival"] or "poisson"
    if kind not in ARRIVALS:
        raise BenchError(f'--arrival: unknown arrival process "{kind}"; valid: {", ".join(ARRIVALS)}, trace')
    rate = options["rate"] if options["rate"] is not None else DEFAULT_RATE
    spec: dict[str, Any] = {"kind": kind, "rate": rate}
    if kind == "gamma" and options["burstiness"] is not None:
        spec["shape"] = options["burstiness"]
    try:
        return parse_arrival_spec(spec)
    except ValueError as exc:
        raise BenchError(f"--arrival/--rate: {exc}") from exc


def _trace_plan(
    options: dict[str, Any],
    workload: Workload,
    rng: np.random.Generator,
    count: int | None,
    duration: float | None,
) -> LoadPlan:
    if not options["trace_format"]:
        raise BenchError(f"--trace needs --trace-format: {', '.join(TRACE_FORMATS)}")
    try:
        records = load_trace(options["trace"], options["trace_format"])
    except (OSError, ValueError) as exc:
        raise BenchError(f"--trace: {exc}") from exc
    records = records[:count] if count else records
    replay = trace_workload(records, workload)
    sessions = str(options["turns"] or "").strip() == "trace"
    if sessions and not trace_turns(records):
        raise BenchError(f"--turns trace: {options['trace']} holds no conversation with more than one turn")
    thinks = workload.think_time.sample(trace_turns(records), rng).tolist() if sessions else []
    specs = trace_specs(
        records, replay, salt=int(rng.integers(0, 2**40)), sessions=sessions, think_times=thinks
    )
    description = f"trace {options['trace']} ({len(records)} requests)"
    if (options["arrival"] or "") == "trace":
        arrivals = trace_arrivals(records)
        return LoadPlan(
            specs, arrivals.offsets(len(specs), rng), None, arrivals.rate, duration, False, description
        )
    if options["concurrency"] is not None:
        return LoadPlan(specs, None, options["concurrency"], None, duration, False, description)
    process = _arrival(options)
    return LoadPlan(specs, process.offsets(len(specs), rng), None, process.rate, duration, False, description)


# -- running ----------------------------------------------------------------------------------------


class LiveLine:
    """Live TTFT/TBT/fluidity on stderr while the load runs.

    It runs on the probe's event loop, so each result costs it one single-request fluidity evaluation
    and a redraw is at most once a second over bounded samples: the measurement must not be disturbed
    by its own progress display. On a terminal one line is rewritten; elsewhere a line every 10%.
    """

    GAP_SAMPLE = 5000  # the latest gaps kept for the TBT percentiles

    def __init__(self, total: int | None, spec: EvaluationSpec, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.tier_name, self.tier_deadline = next(iter(spec.deadlines.decode_tiers.items()), ("medium", 0.05))
        self.prefill = spec.deadlines.prefill_deadline
        self.count = self.failed = 0
        self.ttfts: list[float] = []
        self.fluidity: list[float] = []
        self.gaps: deque[float] = deque(maxlen=self.GAP_SAMPLE)
        self.last_draw = 0.0
        self.next_mark = 0.1

    def __call__(self, result: ProbeResult) -> None:
        self.count += 1
        values = intervals(result)
        if result.ok and values:
            self.ttfts.append(values[0])
            self.gaps.extend(values[1:])
            self.fluidity.append(fluidity_index(values, self.prefill, self.tier_deadline))
        else:
            self.failed += 1
        if self.enabled and self._due():
            sys.stderr.write(("\r" if self.tty else "") + self.render() + ("" if self.tty else "\n"))
            sys.stderr.flush()

    def _due(self) -> bool:
        now = time.monotonic()
        if self.tty:
            if now - self.last_draw < 1.0 and self.count != self.total:
                return False
            self.last_draw = now
            return True
        if self.total is None or self.count / self.total + 1e-9 < self.next_mark:
            return self.total is None and self.count % 50 == 0
        self.next_mark += 0.1
        return True

    def render(self) -> str:
        progress = f"{self.count}/{self.total}" if self.total else f"{self.count}"
        if not self.ttfts:
            return f"[{progress}] failed {self.failed}"
        gaps = np.fromiter(self.gaps, dtype=np.float64) if self.gaps else np.zeros(1)
        return (
            f"[{progress}] failed {self.failed} | TTFT p50 {np.median(self.ttfts):.3f}s"
            f" | TBT p50 {np.median(gaps) * 1e3:.1f}ms p99 {np.percentile(gaps, 99) * 1e3:.1f}ms"
            f" | fluidity({self.tier_name}) p50 {np.median(self.fluidity):.3f} min {min(self.fluidity):.3f}  "
        )

    def close(self) -> None:
        if self.enabled and self.tty and self.count:
            sys.stderr.write("\n")


async def drive(settings: TargetSettings, plan: LoadPlan, workers: int, live: LiveLine) -> LoadRun:
    """Send the plan in this process or over worker processes (shards), with live progress either way."""
    if workers > 1 and isinstance(plan.specs, list):
        return await drive_sharded(settings, plan, plan.specs, workers, live)
    async with ProbeClient(settings) as client:
        await client.resolve_model()
        return await run_load(
            lambda spec, at: client.send(spec, scheduled_at=at),
            plan.specs,
            arrivals=plan.offsets,
            concurrency=plan.concurrency,
            duration=plan.duration,
            target_rate=plan.rate,
            prompt_tokens_exact=plan.prompt_tokens_exact,
            from_scheduled=False,
            on_result=live,
        )


async def drive_sharded(
    settings: TargetSettings, plan: LoadPlan, specs: list[RequestSpec], workers: int, live: LiveLine
) -> LoadRun:
    """The plan dealt over ``workers`` shard processes (open loop by due time, or the concurrency
    split), the results merged in plan order; what made the load other than planned is printed."""
    offsets = None if plan.offsets is None else plan.offsets.tolist()
    async with contextlib.AsyncExitStack() as stack:
        try:
            pool = await stack.enter_async_context(local_shards(workers, settings.api_key))
        except TimeoutError as exc:  # a worker that never started
            raise BenchError(f"--workers: {exc}") from exc
        report = await pool.run_plan(
            settings, specs, offsets=offsets, concurrency=plan.concurrency, duration_s=plan.duration,
            on_result=lambda _index, result: live(result),
        )  # fmt: skip
    for problem in report.problems:
        print(f"fluidity-exporter bench: {problem}", file=sys.stderr)
    sent = [i for i in sorted(report.results) if i not in report.cancelled]
    return load_run_from_results(
        report.in_order(),
        [specs[i] for i in sent],
        target_rate=plan.rate,
        concurrency=plan.concurrency,
        prompt_tokens_exact=plan.prompt_tokens_exact,
    )


@contextmanager
def target_url(options: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    """The target's base URL, starting the simulator in a child process when none is given."""
    if options["url"]:
        yield options["url"], False
        return
    arguments = ["--preset", options["sim_preset"] or DEFAULT_SIM_PRESET]
    try:
        with SimProcess(arguments) as sim:
            yield sim.url, True
    except RuntimeError as exc:
        raise BenchError(str(exc)) from exc


def timestamped(folder: str) -> Path:
    """``folder/20261123T184000Z``: a fresh place for each run's files, so none overwrites another."""
    return Path(folder) / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def refuse_overwrite(path: Path, force: bool) -> None:
    """An earlier result at ``path`` is kept unless ``--force`` says to replace it (checked before any
    load is sent, so a search is never run only to be refused at the end)."""
    if path.exists() and not force:
        raise BenchError(f"{path} exists (an earlier result); choose another --output, or add --force")


def output_directory(options: dict[str, Any]) -> Path:
    if options["output"]:
        return Path(options["output"])
    return Path("bench-results") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def run(args: argparse.Namespace) -> int:
    """The bench command: exit 0 when the measurement is reliable, 1 when the target failed or the
    measurement is not reliable (a health check failed: ``summary.json``'s ``failed_checks``), 2 on bad
    input (usage or config)."""
    try:
        return _run(merged_options(args))
    except BenchError as exc:
        print(f"fluidity-exporter bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(options: dict[str, Any]) -> int:
    spec = evaluation_spec(options)
    workers = options["workers"] or 1
    if workers < 1:
        raise BenchError("--workers must be >= 1")
    cpus = available_cpus()
    if workers > cpus and not options["quiet"]:
        print(f"note: {workers} workers on {cpus} usable CPUs: they will share them", file=sys.stderr)
    with target_url(options) as (url, simulated):
        settings = target_settings(options, url)
        facts = event_loop.run(discover(settings, skip_calibration(options, simulated)))
        plan = load_plan(options, simulated, facts)
        if workers > 1 and isinstance(plan.specs, list) and any(spec.followups for spec in plan.specs):
            # A worker process sends single requests: a session's turns need the answers in one place.
            raise BenchError("--workers: multi-turn sessions (--turns) run in one process; drop --workers")
        quiet = bool(options["quiet"] or options["json"])
        if not quiet:
            print(
                f"target {url}{' (built-in simulator)' if simulated else ''}; {plan.description}",
                *facts.describe(),
                sep="\n",
                file=sys.stderr,
            )
        total = session_turns(plan.specs) if isinstance(plan.specs, list) and plan.duration is None else None
        live = LiveLine(total, spec, not quiet)
        load = event_loop.run(drive(settings, plan, workers, live))
        live.close()
    return report(load, spec, options, facts)


def report(
    load: LoadRun, spec: EvaluationSpec, options: dict[str, Any], facts: TargetFacts | None = None
) -> int:
    """Compute the summary, write the files, print the tables (or the JSON)."""
    measured = measure(load.results, spec)
    checks = [dataclasses.asdict(check) for check in load.checks]
    duration = max(load.finished_at - load.started_at, 1e-9)
    summary = summarize(load.results, measured, spec, duration, checks)
    summary["target"] = (facts or TargetFacts()).to_dict()
    directory = output_directory(options)
    written = write_outputs(directory, load.results, measured, summary, spec)
    if options["plots"]:
        from exporter.report.plots import write_plots

        try:
            written += write_plots(directory, measured)
        except RuntimeError as exc:
            print(f"fluidity-exporter bench: {exc}", file=sys.stderr)
    if options["json"]:
        print(json.dumps(summary, indent=2))
        print(f"wrote {len(written)} files to {directory}", file=sys.stderr)
    else:
        print(render_summary(summary))
        print(f"\nwrote {len(written)} files to {directory}")
    return EXIT_MEASURED if summary["reliable"] else EXIT_FAILED


BENCH_COMMAND = Command("run a one-shot evaluation of an endpoint and write a report", add_arguments, run)
