"""A one-shot run's load plan from its options: which requests, and when (open loop) or how many at once
(closed loop), for a count of requests or a duration; a preset's samples or a replayed trace.

The arrival flags (``--arrival``, ``--rate``, ``--burstiness``) and ``--concurrency`` are read as a daemon
config module's ``arrival`` and ``concurrency`` are, by ``exporter.settings.arrival.read_arrival``: a bad
value fails with the config's message under the flag that gave it (``ARRIVAL_FLAGS``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import numpy as np

from exporter.load.plan import LoadPlan
from exporter.load.target_facts import ContextFit, TargetFacts
from exporter.load.traces import trace_arrivals, trace_specs, trace_turns, trace_workload
from exporter.load.workload_options import served_context, workload_from_options
from exporter.load.workloads import Workload
from exporter.settings.arrival import ArrivalProcess, offsets_within, read_arrival
from exporter.settings.oneshot import Options, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.trace_files import TRACE_FORMATS, load_trace
from exporter.streams.request import RequestSpec

DEFAULT_RATE = 4.0  # requests per second when neither --rate nor --concurrency is given
DEFAULT_REQUESTS = 100  # when neither --requests nor --duration is given
# The flag that gives each part of a module's arrival and concurrency (as the reader reports them).
ARRIVAL_FLAGS: Final = {
    "arrival": "--arrival/--rate",
    "arrival.kind": "--arrival",
    "arrival.rate": "--rate",
    "arrival.shape": "--burstiness",
    "concurrency": "--concurrency",
}


def load_plan(options: Options, simulated: bool, facts: TargetFacts | None = None) -> LoadPlan:
    """Requests and their schedule from the load flags, and what fitting them to the context cut."""
    _check_amounts(options)
    rng = np.random.default_rng(options["seed"] or 0)
    workload = workload_from_options(options, simulated, facts)
    plan = _plan(options, workload, rng)
    if options["trace"]:
        return plan
    return dataclasses.replace(plan, fit=ContextFit.of(workload, served_context(options, simulated, facts)))


def _plan(options: Options, workload: Workload, rng: np.random.Generator) -> LoadPlan:
    count, duration = options["requests"], options["duration"]
    if count is None and duration is None:
        count = DEFAULT_REQUESTS
    if options["trace"]:
        return _trace_plan(options, workload, rng, count, duration)
    exact, described = workload.prompt_tokens_exact, workload.describe()
    process = open_loop(options)
    if process is None:
        # A closed loop refills as fast as requests end: with a duration, draw specs lazily.
        specs = _sample(workload, count, rng) if count else workload.stream(rng)
        return LoadPlan(
            specs,
            concurrency=options["concurrency"],
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
    offsets = process.offsets(count, rng) if count else offsets_within(process, duration, rng)
    if count and duration is not None:
        offsets = offsets[offsets < duration]
    specs = _sample_units(workload, len(offsets), rng)
    return LoadPlan(
        specs,
        offsets,
        rate=process.rate,
        duration=duration,
        prompt_tokens_exact=exact,
        description=f"{described}; {process.describe()}",
    )


def _check_amounts(options: Options) -> None:
    """How much to send, refused before any planning when it could send nothing."""
    for flag, value in (("--requests", options["requests"]), ("--concurrency", options["concurrency"])):
        if value is not None and value < 1:
            raise SettingsError(f"{flag} must be >= 1, got {value}")
    duration = options["duration"]
    if duration is not None and not duration > 0:
        raise SettingsError(f"--duration must be > 0 seconds, got {duration:g}")
    seed = options["seed"]
    if seed is not None and seed < 0:  # numpy's generators take none
        raise SettingsError(f"--seed must be an integer >= 0, got {seed}")


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


def open_loop(options: Options) -> ArrivalProcess | None:
    """The arrival process of the flags (by default Poisson at ``DEFAULT_RATE``), or None for a closed
    loop (``--concurrency``); ``--arrival trace`` replays a trace's times and needs ``--trace``."""
    if (options["arrival"] or "") == "trace":
        raise SettingsError("--arrival trace: needs --trace (the trace whose times it replays)")
    return read_flags(arrival_tree(options), ("arrival", "concurrency"), read_arrival, ARRIVAL_FLAGS)


def arrival_tree(options: Options) -> dict[str, Any]:
    """The arrival flags given, as a daemon config module's ``arrival`` and ``concurrency``."""
    arrival_given = any(options[key] is not None for key in ("arrival", "rate", "burstiness"))
    tree: dict[str, Any] = (
        {"concurrency": options["concurrency"]} if options["concurrency"] is not None else {}
    )
    if tree and not arrival_given:
        return tree
    kind = options["arrival"] or "poisson"
    tree["arrival"] = {"kind": kind, "rate": options["rate"] if options["rate"] is not None else DEFAULT_RATE}
    if options["burstiness"] is not None:
        if kind != "gamma":  # only gamma has a shape: another process would ignore it without a word
            raise SettingsError(
                f"--burstiness: only --arrival gamma has a shape, not {kind}; drop one of them"
            )
        tree["arrival"]["shape"] = options["burstiness"]
    return tree


def _trace_plan(
    options: Options, workload: Workload, rng: np.random.Generator, count: int | None, duration: float | None
) -> LoadPlan:
    if not options["trace_format"]:
        raise SettingsError(f"--trace needs --trace-format: {', '.join(TRACE_FORMATS)}")
    try:
        records = load_trace(options["trace"], options["trace_format"])
    except (OSError, ValueError) as exc:
        raise SettingsError(f"--trace: {exc}") from exc
    records = records[:count] if count else records
    replay = trace_workload(records, workload)
    sessions = str(options["turns"] or "").strip() == "trace"
    if sessions and not trace_turns(records):
        raise SettingsError(
            f"--turns trace: {options['trace']} holds no conversation with more than one turn"
        )
    thinks = workload.think_time.sample(trace_turns(records), rng).tolist() if sessions else []
    specs = trace_specs(
        records, replay, salt=int(rng.integers(0, 2**40)), sessions=sessions, think_times=thinks
    )
    description = f"trace {options['trace']} ({len(records)} requests)"
    if (options["arrival"] or "") == "trace":
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
    process = open_loop(options)
    if process is None:
        return LoadPlan(specs, concurrency=options["concurrency"], duration=duration, description=description)
    return LoadPlan(
        specs, process.offsets(len(specs), rng), rate=process.rate, duration=duration, description=description
    )
