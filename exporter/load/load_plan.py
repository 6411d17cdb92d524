"""A one-shot run's load plan, built from its load flags (``exporter.settings.load_flags``) and its
workload: which requests, and when (open loop) or how many at once (closed loop), for a count of
requests or a duration; a preset's samples or a replayed trace.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exporter.load.plan import LoadPlan
from exporter.load.target_facts import ContextFit
from exporter.load.traces import trace_arrivals, trace_specs, trace_turns, trace_workload
from exporter.load.workloads import Workload
from exporter.settings.arrival import ArrivalProcess, FloatArray, offsets_within
from exporter.settings.load_flags import LoadFlags, TraceFlags
from exporter.settings.problems import SettingsError
from exporter.settings.trace_files import load_trace
from exporter.streams.request import RequestSpec


def load_plan(flags: LoadFlags, workload: Workload, context: int | None) -> LoadPlan:
    """Requests and their schedule from the load flags and ``workload`` (fitted to ``context``, the
    tokens the target serves), and what fitting them to the context cut."""
    rng = np.random.default_rng(flags.seed)
    if flags.trace is not None:
        return _trace_plan(flags, flags.trace, workload, rng)
    return dataclasses.replace(_plan(flags, workload, rng), fit=ContextFit.of(workload, context))


def _plan(flags: LoadFlags, workload: Workload, rng: np.random.Generator) -> LoadPlan:
    count, duration = flags.requests, flags.duration
    exact, described = workload.prompt_tokens_exact, workload.describe()
    process = flags.arrival
    if process is None:
        # A closed loop refills as fast as requests end: with a duration, draw specs lazily.
        specs = _sample(workload, count, rng) if count else workload.stream(rng)
        return LoadPlan(
            specs,
            concurrency=flags.concurrency,
            duration=duration,
            prompt_tokens_exact=exact,
            description=described,
        )
    if workload.sessions and count:  # count requests in all; the arrivals start sessions
        specs = _sample(workload, count, rng)
        offsets = process.offsets(len(specs), rng)
        if duration is not None:
            offsets = offsets[offsets < duration]
        return LoadPlan(
            specs[: len(offsets)],
            offsets,
            rate=process.rate,
            duration=duration,
            prompt_tokens_exact=exact,
            description=described,
        )
    offsets = _offsets(process, count, duration, rng)
    specs = _sample_units(workload, len(offsets), rng)
    return LoadPlan(
        specs,
        offsets,
        rate=process.rate,
        duration=duration,
        prompt_tokens_exact=exact,
        description=f"{described}; {process.describe()}",
    )


def _offsets(
    process: ArrivalProcess, count: int | None, duration: float | None, rng: np.random.Generator
) -> FloatArray:
    """When each of ``count`` arrivals comes, those within ``duration`` (a count, a duration or both)."""
    if count:
        offsets = process.offsets(count, rng)
        return offsets[offsets < duration] if duration is not None else offsets
    assert duration is not None  # LoadFlags: without a count, a duration
    return offsets_within(process, duration, rng)


def _sample(workload: Workload, count: int, rng: np.random.Generator) -> list[RequestSpec]:
    try:
        return workload.sample(count, rng)
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc


def _sample_units(workload: Workload, count: int, rng: np.random.Generator) -> list[RequestSpec]:
    """``count`` sessions (or single requests): one per open-loop arrival."""
    try:
        return workload.sample_sessions(count, rng)
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc


def _trace_plan(
    flags: LoadFlags, trace: TraceFlags, workload: Workload, rng: np.random.Generator
) -> LoadPlan:
    count, duration = flags.requests, flags.duration
    try:
        records = load_trace(trace.path, trace.format)
    except (OSError, ValueError) as exc:
        raise SettingsError(f"--trace: {exc}") from exc
    records = records[:count] if count else records
    replay = trace_workload(records, workload)
    sessions = trace.turns
    if sessions and not trace_turns(records):
        raise SettingsError(f"--turns trace: {trace.path} holds no conversation with more than one turn")
    thinks = workload.think_time.sample(trace_turns(records), rng).tolist() if sessions else []
    specs = trace_specs(
        records, replay, salt=int(rng.integers(0, 2**40)), sessions=sessions, think_times=thinks
    )
    description = f"trace {trace.path} ({len(records)} requests)"
    if trace.arrivals:
        try:
            arrivals = trace_arrivals(records)
        except ValueError as exc:
            raise SettingsError(f"--arrival trace: {exc}") from None
        return LoadPlan(
            specs,
            arrivals.offsets(len(specs), rng),
            rate=arrivals.rate,
            duration=duration,
            description=description,
        )
    process = flags.arrival
    if process is None:
        return LoadPlan(specs, concurrency=flags.concurrency, duration=duration, description=description)
    return LoadPlan(
        specs, process.offsets(len(specs), rng), rate=process.rate, duration=duration, description=description
    )
