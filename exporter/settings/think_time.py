"""Think time (``ThinkTime``): the user's pause between an answer's end and the next message of a
multi-turn session, a distribution in seconds, defined once for the daemon config and the flags.

The default, ``lognormal:median=10,sigma=0.8,max=120`` (mean 13.8 s, p90 28 s), is an estimate, not a
measurement: reading an answer of a few hundred tokens at 4-5 words a second takes 10-60 s and typing a
one-line follow-up 5-15 s; no public trace we know of records think times (ShareGPT and LMSys-Chat
have no timestamps; Mooncake's and Azure's traces have no session ids). Set ``fixed:0`` for
back-to-back turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from exporter.settings.reader import show

THINK_KINDS = ("fixed", "uniform", "exponential", "lognormal")
DEFAULT_THINK_TIME = "lognormal:median=10,sigma=0.8,max=120"
THINK_CEILING_S = 86_400.0  # a day: no field and no draw is longer (a longer wait held a run for ever)


@dataclass(frozen=True)
class ThinkTime:
    """Seconds between an answer's end and the user's next message: ``kind`` with its parameters,
    clipped to ``[0, max]``."""

    kind: str = "lognormal"
    params: tuple[tuple[str, float], ...] = (("median", 10.0), ("sigma", 0.8))
    max: float | None = 120.0

    def sample(self, n: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """``n`` think times in seconds."""
        p = dict(self.params)
        if self.kind == "fixed":
            values = np.full(n, p["value"])
        elif self.kind == "uniform":
            values = rng.uniform(p["low"], p["high"], size=n)
        elif self.kind == "exponential":
            values = rng.exponential(p["mean"], size=n)
        else:
            values = np.exp(rng.normal(np.log(p["median"]), p["sigma"], size=n))
        upper = self.max if self.max is not None else THINK_CEILING_S
        clipped: npt.NDArray[np.float64] = np.clip(values, 0.0, upper)
        return clipped

    def describe(self) -> str:
        """The spec that rebuilds it."""
        fields = [f"{name}={value:g}" for name, value in self.params]
        if self.max is not None and self.kind != "fixed":
            fields.append(f"max={self.max:g}")
        return f"{self.kind}:{','.join(fields)}"


_THINK_PARAMS = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "exponential": ("mean",),
    "lognormal": ("median", "sigma"),
}


def parse_think_time(spec: str | float | Mapping[str, Any]) -> ThinkTime:
    """``"fixed:2"``, ``"2"``, ``"uniform:low=1,high=8"``, ``"exponential:mean=5"``,
    ``"lognormal:median=10,sigma=0.8,max=120"`` or the same as a mapping with ``kind``; raises
    ``ValueError`` naming the field and the valid options."""
    fields = _think_fields(spec)
    kind = str(fields.pop("kind", "fixed"))
    if kind not in _THINK_PARAMS:
        raise ValueError(f'unknown think-time distribution "{kind}"; valid: {", ".join(THINK_KINDS)}')
    limit = fields.pop("max", None)
    expected = _THINK_PARAMS[kind]
    unknown = sorted(set(fields) - set(expected), key=str)  # YAML keys may be numbers too
    if unknown or set(expected) - set(fields):
        raise ValueError(f"{kind} think time needs {', '.join(expected)} (and optionally max), got {spec!r}")
    values = {name: _seconds(fields[name], f"{kind}.{name}") for name in expected}
    if kind == "uniform" and values["low"] > values["high"]:
        raise ValueError(f"uniform think time: low must be <= high, got {spec!r}")
    if kind == "lognormal" and values["median"] <= 0:
        raise ValueError(f"lognormal think time: median must be > 0 seconds, got {spec!r}")
    maximum = None if limit is None else _seconds(limit, f"{kind}.max")
    return ThinkTime(kind, tuple((name, values[name]) for name in expected), maximum)


def _think_fields(spec: str | float | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return {"kind": "fixed", "value": spec}
    text = str(spec).strip()
    kind, sep, rest = text.partition(":")
    if not sep:
        return {"kind": "fixed", "value": text}
    if kind == "fixed" and "=" not in rest:
        return {"kind": "fixed", "value": rest}
    fields: dict[str, Any] = {"kind": kind}
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f'think time "{text}": "{item}" needs name=value')
        fields[name.strip()] = value.strip()
    return fields


def _seconds(value: object, where: str) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"think time {where}: expected seconds, got {value!r}") from None
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"think time {where}: expected seconds >= 0, got {value!r}")
    if seconds > THINK_CEILING_S:
        raise ValueError(f"think time {where}: at most {THINK_CEILING_S:g} seconds (a day), got {value!r}")
    return seconds


def think_spec(value: Any) -> ThinkTime:
    """A think-time spec as YAML or JSON gives it: a string, a number of seconds or a mapping."""
    if not isinstance(value, str | int | float | Mapping) or isinstance(value, bool):
        raise ValueError(f"must be a think-time spec like lognormal:median=10,sigma=0.8, got {show(value)}")
    return parse_think_time(value)
