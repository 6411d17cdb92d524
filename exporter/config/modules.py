"""The ``modules`` and ``slos`` sections: what a probe run sends and when, and how its results are judged.

A module's workload is checked against its length filters at load time, so a filter that rejects every
draw is a config problem rather than a failing job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from exporter.config import bounds
from exporter.config.model import Module, ProbeSchedule, SloConfig, Target, WorkloadSpec
from exporter.config.values import arrival_spec, check_cron, length_spec, preset_spec
from exporter.load.arrivals import ArrivalProcess
from exporter.load.distributions import Fixed
from exporter.load.sessions import ThinkTime, parse_think_time
from exporter.load.traces import TRACE_FORMATS, load_trace
from exporter.load.workloads import PairedLengths, Workload
from exporter.options.reader import Context, Section, show
from exporter.options.slo import read_slo

MODULE_KEYS = (
    "workload", "max_prompt_tokens", "max_output_tokens", "requests_per_run", "arrival", "concurrency",
    "schedule",
)  # fmt: skip
# A workload mapping: one source of lengths (a preset, a trace, or two distributions) and sessions.
WORKLOAD_KEYS = ("preset", "prompt_tokens", "output_tokens", "trace", "format")
SESSION_KEYS = ("turns", "think_time", "tool_calls", "response_format")


def think_spec(value: Any) -> ThinkTime:
    if not isinstance(value, str | int | float | Mapping) or isinstance(value, bool):
        raise ValueError(f"must be a think-time spec like lognormal:median=10,sigma=0.8, got {show(value)}")
    return parse_think_time(value)


def response_format_spec(value: Any) -> str:
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise ValueError(
            'must be a response_format object with a "type", e.g. {type: json_schema, json_schema: {...}}, '
            f"got {show(value)}"
        )
    return json.dumps(value, sort_keys=True)


class ModuleReader:
    """Reads one module or one SLO (``exporter.options.slo.read_slo``, as the flags read theirs) at a time."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def module(self, name: str, sec: Section) -> Module:
        before = len(self.ctx.problems.items)
        schedule = sec.section("schedule", ("interval", "jitter", "cron"))
        arrival = self.arrival(sec)
        module = Module(
            name=name,
            workload=self.workload(sec),
            max_prompt_tokens=sec.opt_integer("max_prompt_tokens", None, 1, bounds.MAX_PROMPT_TOKENS),
            max_output_tokens=sec.opt_integer("max_output_tokens", None, 1, bounds.MAX_OUTPUT_TOKENS),
            requests_per_run=sec.integer("requests_per_run", 2, 1, bounds.MAX_REQUESTS_PER_RUN),
            arrival=arrival,
            concurrency=None
            if arrival is not None
            else sec.opt_integer("concurrency", 1, 1, bounds.MAX_CONCURRENCY) or 1,
            schedule=self.schedule(schedule) if schedule is not None else ProbeSchedule(),
        )
        if len(self.ctx.problems.items) == before:
            self.check_filters(sec, module)
        return module

    def workload(self, sec: Section) -> WorkloadSpec:
        raw = sec.get("workload")
        if raw is None:
            return WorkloadSpec()
        if isinstance(raw, str):
            return sec.read("workload", WorkloadSpec(), preset_spec, resolve=False)
        lengths = Section.open(raw, sec.at("workload"), self.ctx.problems, (*WORKLOAD_KEYS, *SESSION_KEYS))
        if lengths is None:
            return WorkloadSpec()
        return self.sessions(lengths, self.lengths(lengths))

    def lengths(self, sec: Section) -> WorkloadSpec:
        if sec.has("preset"):
            if any(sec.has(key) for key in WORKLOAD_KEYS[1:]):
                self.ctx.problems.add(
                    sec.path, "give one of preset, trace (with format) or prompt_tokens/output_tokens"
                )
            return sec.read("preset", WorkloadSpec(), preset_spec, resolve=False)
        if sec.has("trace") or sec.has("format"):
            return self.trace_workload(sec)
        default = WorkloadSpec()
        return WorkloadSpec(
            prompt_tokens=sec.read("prompt_tokens", default.prompt_tokens, length_spec),
            output_tokens=sec.read("output_tokens", default.output_tokens, length_spec),
        )

    def sessions(self, sec: Section, spec: WorkloadSpec) -> WorkloadSpec:
        """``turns``, ``think_time``, ``tool_calls`` and ``response_format`` of a workload mapping."""
        spec = replace(
            spec,
            turns=sec.read("turns", None, length_spec),
            think_time=sec.read("think_time", None, think_spec, resolve=False),
            tool_calls=sec.boolean("tool_calls", False),
            response_format=sec.read("response_format", None, response_format_spec, resolve=False),
        )
        if (
            spec.tool_calls
            and spec.turns is not None
            and not (isinstance(spec.turns, Fixed) and spec.turns.value == 1)
        ):
            self.ctx.problems.add(
                sec.path,
                "tool_calls and turns above 1 exclude each other (a conversation would need tool results)",
            )
        return spec

    def trace_workload(self, sec: Section) -> WorkloadSpec:
        """``{trace: PATH, format: sharegpt|azure|mooncake|jsonl}``: (prompt, output) pairs of a real trace,
        read now (relative to the config file) so a bad file fails at start-up, with its line."""
        if sec.has("prompt_tokens") or sec.has("output_tokens"):
            self.ctx.problems.add(sec.path, "give either trace (with format) or prompt_tokens/output_tokens")
            return WorkloadSpec()
        if not (sec.required("trace") and sec.required("format")):
            return WorkloadSpec()
        fmt = sec.choice("format", "jsonl", tuple(TRACE_FORMATS))
        path = self.ctx.path(str(sec.get("trace")))
        try:
            records = load_trace(path, fmt)
            pairs = PairedLengths(
                tuple(r.prompt_tokens for r in records),
                tuple(r.output_tokens for r in records),
                source=str(path),
            )
        except (OSError, ValueError) as exc:
            sec.fail("trace", str(exc))
            return WorkloadSpec()
        return WorkloadSpec(trace=pairs)

    def arrival(self, sec: Section) -> ArrivalProcess | None:
        if sec.get("arrival") is None:
            return None
        if sec.get("concurrency") is not None:
            self.ctx.problems.add(
                sec.path, "give either arrival (open loop) or concurrency (closed loop), not both"
            )
            return None
        return sec.read("arrival", None, arrival_spec, resolve=False)

    def schedule(self, sec: Section) -> ProbeSchedule:
        cron = sec.read("cron", None, check_cron, resolve=False)
        if sec.has("cron") and sec.has("interval"):
            self.ctx.problems.add(sec.path, "give either interval or cron, not both")
        interval = None if sec.has("cron") else sec.duration("interval", 30.0, maximum=bounds.MAX_INTERVAL_S)
        jitter = sec.duration("jitter", 0.0, positive=False, maximum=bounds.MAX_INTERVAL_S)
        if interval is not None and jitter >= interval:
            sec.fail("jitter", f"must be less than the interval ({interval:g} s), got {jitter:g} s")
        return ProbeSchedule(interval_s=interval, jitter_s=jitter, cron=cron)

    def check_filters(self, sec: Section, module: Module) -> None:
        """A workload whose length filters reject (nearly) every draw is an error now, not at run time."""
        workload = module.workload_for(Target("check", "http://check"))
        try:
            workload.sample_lengths(1, np.random.default_rng(0))
        except ValueError as exc:
            self.ctx.problems.add(sec.path, self.ceiling_problem(workload) or str(exc))

    def ceiling_problem(self, workload: Workload) -> str | None:
        """Why no draw is kept when it is the ceilings' doing (lengths no request may have)."""
        prompts, outputs = workload.lengths.sample(256, np.random.default_rng(0))
        for what, drawn, ceiling in (
            ("prompt", prompts, bounds.MAX_PROMPT_TOKENS),
            ("output", outputs, bounds.MAX_OUTPUT_TOKENS),
        ):
            if int(drawn.min()) > ceiling:
                return (
                    f"workload {workload.name}: every {what} length drawn is above the ceiling of "
                    f"{ceiling} tokens a request may have (e.g. {int(drawn.min())})"
                )
        return None

    def slo(self, name: str, sec: Section) -> SloConfig:
        return SloConfig.of(name, read_slo(sec, self.ctx.path))
