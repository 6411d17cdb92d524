"""Arrival processes: when each request of an open-loop load should be sent.

Every process yields *absolute* offsets in seconds from the start of the load, non-decreasing, the
first at 0 (so a load begins at once and the ``n - 1`` gaps after it are the process's inter-arrival
times). The runner sleeps until ``start + offset`` for each request, so lateness never accumulates.

* ``poisson(rate)``: exponential gaps with mean ``1 / rate`` (coefficient of variation 1).
* ``gamma(rate, shape)``: gamma gaps with mean ``1 / rate`` and coefficient of variation
  ``1 / sqrt(shape)``; ``shape`` < 1 is burstier than Poisson, 1 *is* Poisson, > 1 is smoother (the
  "burstiness" knob of vLLM's and Etalon's benchmarks).
* ``constant(rate)``: exactly ``1 / rate`` apart.
* ``TraceReplay(timestamps, time_scale)``: a trace's own timestamps, shifted to start at 0 and
  multiplied by ``time_scale`` (0.5 replays twice as fast, 2 at half speed).

Closed-loop fixed concurrency has no arrival process: the runner keeps N requests in flight.

Defined once for the daemon config (``modules.<name>.arrival``, read by ``read_arrival``), the jobs API
(a capacity search's ``arrival`` without its rate, ``arrival_without_rate``) and the flags (``--arrival``,
``--rate``, ``--burstiness``, put in the config's shape by ``exporter.settings.load_flags``): a bad value
fails with the same message under its path or its flag. A ``SpecError`` names the part of a spec that
is wrong, so the flag that gave that part is named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from exporter.settings.problems import SpecError
from exporter.settings.reader import Section, show

FloatArray = npt.NDArray[np.float64]
ARRIVAL_KINDS = ("constant", "gamma", "poisson")


@runtime_checkable
class ArrivalProcess(Protocol):
    """Absolute send offsets (seconds from the start) for ``n`` requests."""

    @property
    def rate(self) -> float:
        """The mean rate in requests per second."""
        ...

    def offsets(self, n: int, rng: np.random.Generator) -> FloatArray: ...

    def describe(self) -> str: ...


def _offsets_from_gaps(gaps: FloatArray) -> FloatArray:
    """``[0, g0, g0 + g1, ...]``: the first request goes at once."""
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if len(gaps) else np.zeros(0)


def _check_rate(kind: str, rate: float) -> None:
    if not (math.isfinite(rate) and rate > 0):
        raise SpecError(
            f'{kind}: field "rate" must be a number > 0 (requests per second), got {rate!r}', "rate"
        )


@dataclass(frozen=True)
class Poisson:
    """A Poisson process: independent exponential gaps."""

    rate: float

    def __post_init__(self) -> None:
        _check_rate("poisson", self.rate)

    def offsets(self, n: int, rng: np.random.Generator) -> FloatArray:
        return _offsets_from_gaps(rng.exponential(1.0 / self.rate, size=n))

    def describe(self) -> str:
        return f"poisson:rate={self.rate:g}"


@dataclass(frozen=True)
class Gamma:
    """A renewal process with gamma gaps: mean ``1 / rate``, coefficient of variation ``1 / sqrt(shape)``."""

    rate: float
    shape: float = 1.0

    def __post_init__(self) -> None:
        _check_rate("gamma", self.rate)
        if not (math.isfinite(self.shape) and self.shape > 0):
            raise SpecError(
                f'gamma: field "shape" must be a number > 0 (1 = Poisson), got {self.shape!r}', "shape"
            )

    def offsets(self, n: int, rng: np.random.Generator) -> FloatArray:
        scale = 1.0 / (self.rate * self.shape)
        return _offsets_from_gaps(rng.gamma(self.shape, scale, size=n))

    def describe(self) -> str:
        return f"gamma:rate={self.rate:g},shape={self.shape:g}"


@dataclass(frozen=True)
class Constant:
    """Evenly spaced sends."""

    rate: float

    def __post_init__(self) -> None:
        _check_rate("constant", self.rate)

    def offsets(self, n: int, rng: np.random.Generator) -> FloatArray:
        return np.arange(n, dtype=np.float64) / self.rate

    def describe(self) -> str:
        return f"constant:rate={self.rate:g}"


@dataclass(frozen=True)
class TraceReplay:
    """Replays recorded timestamps (any unit converted to seconds by the loader), scaled in time."""

    timestamps: tuple[float, ...]
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.timestamps:
            raise ValueError("trace replay: the trace has no timestamps")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(f"trace replay: time_scale must be a number > 0, got {self.time_scale!r}")
        if any(b < a for a, b in zip(self.timestamps, self.timestamps[1:], strict=False)):
            raise ValueError("trace replay: timestamps must be non-decreasing (sort the trace first)")

    @property
    def rate(self) -> float:
        """Requests per second of the scaled trace (its count over its span); inf for a zero span."""
        span = (self.timestamps[-1] - self.timestamps[0]) * self.time_scale
        return (len(self.timestamps) - 1) / span if span > 0 else math.inf

    def offsets(self, n: int, rng: np.random.Generator) -> FloatArray:
        if n > len(self.timestamps):
            raise ValueError(f"trace replay: the trace has {len(self.timestamps)} timestamps; asked for {n}")
        stamps = np.asarray(self.timestamps[:n], dtype=np.float64)
        return (stamps - stamps[0]) * self.time_scale if n else stamps

    def describe(self) -> str:
        return f"trace:requests={len(self.timestamps)},time_scale={self.time_scale:g}"


def offsets_within(process: ArrivalProcess, duration: float, rng: np.random.Generator) -> FloatArray:
    """Every offset of ``process`` that falls before ``duration`` seconds (for duration-limited loads)."""
    if isinstance(process, TraceReplay):
        all_offsets = process.offsets(len(process.timestamps), rng)
        return all_offsets[all_offsets < duration]
    # Draw in one go with a generous margin (mean + 10 sigma of a Poisson count), rarely twice.
    expected = process.rate * duration
    n = int(expected + 10 * math.sqrt(expected) + 16)
    while True:
        drawn = process.offsets(n, rng)
        if drawn[-1] >= duration:
            return drawn[drawn < duration]
        n *= 2


def parse_arrival_spec(spec: str | Mapping[str, Any]) -> ArrivalProcess:
    """``"poisson:rate=10"``, ``"gamma:rate=10,shape=0.5"`` (``burstiness`` is an alias of ``shape``),
    ``"constant:rate=5"``, or a mapping with ``kind``."""
    params = _arrival_mapping(spec)
    kind = str(params.pop("kind", "")).strip().lower()
    if kind not in ARRIVAL_KINDS:
        raise SpecError(f'unknown arrival process "{kind}"; valid: {", ".join(ARRIVAL_KINDS)}', "kind")
    if "burstiness" in params and kind == "gamma":
        params.setdefault("shape", params.pop("burstiness"))
    valid = ("rate", "shape") if kind == "gamma" else ("rate",)
    unknown = sorted(k for k in params if k not in valid)
    if unknown:
        extra = ", burstiness" if kind == "gamma" else ""
        raise SpecError(f'{kind}: unknown field "{unknown[0]}"; valid: {", ".join(valid)}{extra}', unknown[0])
    if "rate" not in params:
        raise SpecError(f'{kind}: missing field "rate" (requests per second)', "rate")
    rate = _number(kind, "rate", params["rate"])
    if kind == "gamma":
        return Gamma(rate, _number(kind, "shape", params.get("shape", 1.0)))
    return Poisson(rate) if kind == "poisson" else Constant(rate)


def _arrival_mapping(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return {str(k): v for k, v in spec.items()}
    kind, _, rest = spec.strip().partition(":")
    params: dict[str, Any] = {"kind": kind}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f'{kind}: expected field=value, got "{item}"')
        params[name.strip()] = value.strip()
    return params


def _number(kind: str, name: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SpecError(f'{kind}: field "{name}" must be a number, got {raw!r}', name) from None
    if isinstance(raw, bool):
        raise SpecError(f'{kind}: field "{name}" must be a number, got {raw!r}', name)
    return value


def arrival_spec(value: Any) -> ArrivalProcess:
    """An arrival spec as YAML or JSON gives it: a string or a mapping (``parse_arrival_spec``)."""
    if not isinstance(value, str | Mapping):
        raise ValueError(
            f"must be an arrival spec like poisson:rate=2 or {{kind: poisson, rate: 2}}, got {show(value)}"
        )
    return parse_arrival_spec(value)


def read_arrival(sec: Section) -> ArrivalProcess | None:
    """``arrival`` of a module-shaped mapping: the open loop's process (None: a closed loop, whose
    ``concurrency`` its reader reads); giving both is a problem of the mapping."""
    if sec.get("arrival") is None:
        return None
    if sec.get("concurrency") is not None:
        sec.complain("give either {} (open loop) or {} (closed loop), not both", ("arrival", "concurrency"))
        return None
    return sec.read("arrival", None, arrival_spec, resolve=False)


def arrival_without_rate(value: Any) -> str:
    """An arrival spec without its rate (``poisson``, ``constant``, ``gamma:shape=0.5``), as a capacity
    search takes it: the search sets the rate of each trial, so it is checked here with a stand-in rate."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be an arrival process without a rate, e.g. poisson, got {show(value)}")
    _, _, rest = value.strip().partition(":")
    if any(part.partition("=")[0].strip() == "rate" for part in rest.split(",")):
        raise ValueError(f"leave the rate out of {show(value)}: the search sets it for each trial")
    at_rate(value, 1.0)
    return value.strip()


def at_rate(arrival: str, rate: float) -> ArrivalProcess:
    """The process of a spec without its rate (``arrival_without_rate``) at ``rate`` requests/s."""
    kind, _, rest = arrival.strip().partition(":")
    parts = [part.strip() for part in rest.split(",") if part.strip()]
    return parse_arrival_spec(f"{kind}:{','.join([*parts, f'rate={rate!r}'])}")


def gaps(offsets: Sequence[float] | FloatArray) -> FloatArray:
    """Inter-arrival times of a schedule (pure helper for checks and tests)."""
    return np.diff(np.asarray(offsets, dtype=np.float64))
