"""How much a one-shot run sends and when, from its flags: a count of requests or a duration, open loop
at a rate or closed loop at a concurrency, a preset's samples or a replayed trace.

The arrival flags (``--arrival``, ``--rate``, ``--burstiness``) and ``--concurrency`` are read as a daemon
config module's ``arrival`` and ``concurrency`` are, by ``exporter.settings.arrival.read_arrival``: a bad
value fails with the config's message under the flag that gave it (``ARRIVAL_FLAGS``). The load plan is
built from these values by ``exporter.load.load_plan``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from exporter.settings.arrival import ArrivalProcess, read_arrival
from exporter.settings.oneshot import FlagReading, RawFlags, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.trace_files import TRACE_FORMATS
from exporter.settings.workload_flags import replays_trace_turns

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


@dataclass(frozen=True)
class TraceFlags:
    """A trace to replay: its file and format, and whether its times (``--arrival trace``) and its
    conversations' turns (``--turns trace``) are replayed too."""

    path: str
    format: str
    arrivals: bool = False
    turns: bool = False


@dataclass(frozen=True)
class LoadFlags:
    """The load flags read: how many requests (``requests``, None: as many as ``duration`` allows),
    for how long, the random seed, and when they are sent: ``arrival`` (open loop; None with
    ``concurrency``, a closed loop, or with a trace's own times) and ``trace`` (None: a preset's
    samples)."""

    requests: int | None = DEFAULT_REQUESTS
    duration: float | None = None
    seed: int = 0
    concurrency: int | None = None
    arrival: ArrivalProcess | None = None
    trace: TraceFlags | None = None


def read_load_flags(raw: RawFlags) -> LoadFlags:
    """The load flags, every bad one reported together."""
    reading = FlagReading()
    reading(lambda: _check_amounts(raw))
    trace = reading(lambda: _read_trace(raw))
    arrival = reading(lambda: None if trace is not None and trace.arrivals else open_loop(raw))
    reading.done()
    count, duration = raw.get("requests"), raw.get("duration")
    if count is None and duration is None:
        count = DEFAULT_REQUESTS
    return LoadFlags(count, duration, raw.get("seed") or 0, raw.get("concurrency"), arrival, trace)


def _check_amounts(raw: RawFlags) -> None:
    """How much to send, refused when it could send nothing."""
    problems = [
        f"{flag} must be >= 1, got {value}"
        for flag, value in (("--requests", raw.get("requests")), ("--concurrency", raw.get("concurrency")))
        if value is not None and value < 1
    ]
    duration = raw.get("duration")
    if duration is not None and not duration > 0:
        problems.append(f"--duration must be > 0 seconds, got {duration:g}")
    seed = raw.get("seed")
    if seed is not None and seed < 0:  # numpy's generators take none
        problems.append(f"--seed must be an integer >= 0, got {seed}")
    if problems:
        raise SettingsError("; ".join(problems))


def _read_trace(raw: RawFlags) -> TraceFlags | None:
    """``--trace`` and its format (None: no trace)."""
    path = raw.get("trace")
    if not path:
        return None
    if not raw.get("trace_format"):
        raise SettingsError(f"--trace needs --trace-format: {', '.join(TRACE_FORMATS)}")
    arrivals = (raw.get("arrival") or "") == "trace"
    if arrivals:
        _refuse_pacing(raw)
    return TraceFlags(str(path), str(raw["trace_format"]), arrivals, replays_trace_turns(raw))


def _refuse_pacing(raw: RawFlags) -> None:
    """``--arrival trace`` sends at the trace's own times, so a rate or a concurrency would be ignored."""
    given = [flag for flag in ("concurrency", "rate", "burstiness") if raw.get(flag) is not None]
    if given:
        flags = " and ".join(f"--{flag}" for flag in given)
        raise SettingsError(
            f"--arrival trace sends each request at the trace's own time: drop {flags}, or drop "
            "--arrival trace to send the trace's requests at that pace"
        )


def open_loop(raw: RawFlags) -> ArrivalProcess | None:
    """The arrival process of the flags (by default Poisson at ``DEFAULT_RATE``), or None for a closed
    loop (``--concurrency``); ``--arrival trace`` replays a trace's times and needs ``--trace``."""
    if (raw.get("arrival") or "") == "trace":
        raise SettingsError("--arrival trace: needs --trace (the trace whose times it replays)")
    return read_flags(arrival_tree(raw), ("arrival", "concurrency"), read_arrival, ARRIVAL_FLAGS)


def arrival_tree(raw: RawFlags) -> dict[str, Any]:
    """The arrival flags given, as a daemon config module's ``arrival`` and ``concurrency``."""
    concurrency, rate, burstiness = raw.get("concurrency"), raw.get("rate"), raw.get("burstiness")
    arrival_given = any(value is not None for value in (raw.get("arrival"), rate, burstiness))
    tree: dict[str, Any] = {"concurrency": concurrency} if concurrency is not None else {}
    if tree and not arrival_given:
        return tree
    kind = raw.get("arrival") or "poisson"
    tree["arrival"] = {"kind": kind, "rate": rate if rate is not None else DEFAULT_RATE}
    if burstiness is not None:
        if kind != "gamma":  # only gamma has a shape: another process would ignore it without a word
            raise SettingsError(
                f"--burstiness: only --arrival gamma has a shape, not {kind}; drop one of them"
            )
        tree["arrival"]["shape"] = burstiness
    return tree
