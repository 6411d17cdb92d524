"""A one-shot run's load plan from its options: which requests, and when (open loop) or how many at once
(closed loop), for a count of requests or a duration; a preset's samples or a replayed trace."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from exporter.load.arrivals import ArrivalProcess, offsets_within, parse_arrival_spec
from exporter.load.target_facts import TargetFacts
from exporter.load.traces import (
    TRACE_FORMATS,
    load_trace,
    trace_arrivals,
    trace_specs,
    trace_turns,
    trace_workload,
)
from exporter.load.workload_options import workload_from_options
from exporter.load.workloads import Workload
from exporter.options.oneshot import OptionError, Options
from exporter.probe.target import RequestSpec

ARRIVALS = ("poisson", "gamma", "constant")
DEFAULT_RATE = 4.0  # requests per second when neither --rate nor --concurrency is given
DEFAULT_REQUESTS = 100  # when neither --requests nor --duration is given


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


def load_plan(options: Options, simulated: bool, facts: TargetFacts | None = None) -> LoadPlan:
    """Requests and their schedule from the load flags."""
    rng = np.random.default_rng(options["seed"] or 0)
    workload = workload_from_options(options, simulated, facts)
    count, duration = options["requests"], options["duration"]
    if count is None and duration is None:
        count = DEFAULT_REQUESTS
    if options["trace"]:
        return _trace_plan(options, workload, rng, count, duration)
    concurrency = options["concurrency"]
    if concurrency is not None and options["rate"] is not None:
        raise OptionError("--rate and --concurrency exclude each other: open loop or closed loop")
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
        raise OptionError(str(exc)) from exc


def _sample_units(workload: Workload, count: int, rng: np.random.Generator) -> list[RequestSpec]:
    """``count`` sessions (or single requests): one per open-loop arrival."""
    try:
        return workload.sample_sessions(count, rng)
    except ValueError as exc:
        raise OptionError(str(exc)) from exc


def _arrival(options: Options) -> ArrivalProcess:
    kind = options["arrival"] or "poisson"
    if kind not in ARRIVALS:
        raise OptionError(f'--arrival: unknown arrival process "{kind}"; valid: {", ".join(ARRIVALS)}, trace')
    rate = options["rate"] if options["rate"] is not None else DEFAULT_RATE
    spec: dict[str, Any] = {"kind": kind, "rate": rate}
    if kind == "gamma" and options["burstiness"] is not None:
        spec["shape"] = options["burstiness"]
    try:
        return parse_arrival_spec(spec)
    except ValueError as exc:
        raise OptionError(f"--arrival/--rate: {exc}") from exc


def _trace_plan(
    options: Options, workload: Workload, rng: np.random.Generator, count: int | None, duration: float | None
) -> LoadPlan:
    if not options["trace_format"]:
        raise OptionError(f"--trace needs --trace-format: {', '.join(TRACE_FORMATS)}")
    try:
        records = load_trace(options["trace"], options["trace_format"])
    except (OSError, ValueError) as exc:
        raise OptionError(f"--trace: {exc}") from exc
    records = records[:count] if count else records
    replay = trace_workload(records, workload)
    sessions = str(options["turns"] or "").strip() == "trace"
    if sessions and not trace_turns(records):
        raise OptionError(f"--turns trace: {options['trace']} holds no conversation with more than one turn")
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
