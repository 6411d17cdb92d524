"""Length distributions for prompts and outputs, in tokens, and the small spec language that names them.

Every distribution draws from a caller's ``numpy.random.Generator`` (so a seed reproduces a workload),
rounds to whole tokens and clips to ``[min, max]`` (``min`` defaults to 1: a request has at least one
token; ``max`` defaults to no limit). ``zipf`` is the exception: it is *truncated* to ``[min, max]``
(renormalised), because clipping a heavy tail would pile its mass onto ``max``.

A spec is a string or a mapping (from YAML/JSON):

    "128"                                          fixed at 128 tokens
    "fixed:value=128"
    "uniform:low=64,high=512"
    "normal:mean=300,std=50,min=1,max=1024"
    "lognormal:median=200,sigma=0.8,min=1,max=4096"
    "zipf:a=1.2,min=1,max=4096"
    "empirical:file=lengths.txt"                   numbers separated by spaces, commas or newlines
    {"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 4096}
    {"kind": "empirical", "values": [12, 40, 300]}

Errors name the distribution, the field and the valid options. Defined once for the daemon config
(``modules.<name>.workload``), the flags (``--prompt-tokens``, ``--turns``...) and the presets, read by
``exporter.settings.workload``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from exporter.settings.reader import show

IntArray = npt.NDArray[np.int64]

# Bounded support for zipf when no max is given: longer than any context window we expect to serve.
ZIPF_DEFAULT_MAX = 131_072
DRAW_CEILING = 2.0**53  # the longest a draw is made: exact as a float, far inside int64, far past any filter
# The largest zipf support we tabulate: the probability table is one float per length.
_ZIPF_MAX_SUPPORT = 10_000_000
# Ceilings that hold whatever the filters say: a prompt is built in memory (about 5 bytes a token)
# before it is sent, so a length spec of 10**12 tokens must never reach the prompt builder. No served
# model has a context of a million tokens or more today; a longer prompt is refused by any server.
MAX_PROMPT_TOKENS = 1_048_576
MAX_OUTPUT_TOKENS = 1_048_576


@runtime_checkable
class LengthDistribution(Protocol):
    """Draws ``n`` token counts (int64, each within the distribution's ``[min, max]``)."""

    def sample(self, n: int, rng: np.random.Generator) -> IntArray: ...

    def describe(self) -> str:
        """The spec string that rebuilds this distribution."""
        ...


@dataclass(frozen=True)
class Bounds:
    """Clip limits in tokens; ``high`` None means unbounded."""

    low: int = 1
    high: int | None = None

    def __post_init__(self) -> None:
        if self.low < 0:
            raise ValueError(f'field "min" must be >= 0, got {self.low}')
        if self.high is not None and self.high < self.low:
            raise ValueError(f'field "max" ({self.high}) must be >= "min" ({self.low})')

    def clip(self, values: npt.NDArray[np.float64]) -> IntArray:
        """Round to whole tokens, then clip (unbounded: at ``DRAW_CEILING``, so no draw overflows the
        integer it becomes, and one that long is left out by the length filters as too long)."""
        upper = DRAW_CEILING if self.high is None else float(self.high)
        return np.clip(np.rint(values), float(self.low), upper).astype(np.int64)

    def spec(self) -> str:
        return f",min={self.low}" + ("" if self.high is None else f",max={self.high}")


@dataclass(frozen=True)
class Fixed:
    """Always ``value`` tokens."""

    value: int
    bounds: Bounds = field(default_factory=Bounds)

    def __post_init__(self) -> None:
        _require(self.value >= 0, "fixed", "value", "an integer >= 0", self.value)
        _above_min("fixed", "value", self.value, self.bounds)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        return self.bounds.clip(np.full(n, float(self.value)))

    def describe(self) -> str:
        return f"fixed:value={self.value}{self.bounds.spec()}"


@dataclass(frozen=True)
class Uniform:
    """Integers uniform on ``[low, high]``, both included."""

    low: int
    high: int
    bounds: Bounds = field(default_factory=Bounds)

    def __post_init__(self) -> None:
        _require(self.low >= 0, "uniform", "low", "an integer >= 0", self.low)
        _require(self.high >= self.low, "uniform", "high", f"an integer >= low ({self.low})", self.high)
        _above_min("uniform", "high", self.high, self.bounds)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        ceiling = int(DRAW_CEILING)  # numpy draws no integer past int64
        drawn = rng.integers(min(self.low, ceiling), min(self.high, ceiling), size=n, endpoint=True)
        return self.bounds.clip(drawn.astype(np.float64))

    def describe(self) -> str:
        return f"uniform:low={self.low},high={self.high}{self.bounds.spec()}"


@dataclass(frozen=True)
class Normal:
    """Gaussian with ``mean`` and ``std``, rounded and clipped."""

    mean: float
    std: float
    bounds: Bounds = field(default_factory=Bounds)

    def __post_init__(self) -> None:
        _require(self.std >= 0, "normal", "std", "a number >= 0", self.std)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        return self.bounds.clip(rng.normal(self.mean, self.std, size=n))

    def describe(self) -> str:
        return f"normal:mean={self.mean:g},std={self.std:g}{self.bounds.spec()}"


@dataclass(frozen=True)
class LogNormal:
    """Log-normal given by its ``median`` (``exp(mu)``) and ``sigma`` (the std of the log)."""

    median: float
    sigma: float
    bounds: Bounds = field(default_factory=Bounds)

    def __post_init__(self) -> None:
        _require(self.median > 0, "lognormal", "median", "a number > 0", self.median)
        _require(self.sigma >= 0, "lognormal", "sigma", "a number >= 0", self.sigma)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        return self.bounds.clip(rng.lognormal(math.log(self.median), self.sigma, size=n))

    def describe(self) -> str:
        return f"lognormal:median={self.median:g},sigma={self.sigma:g}{self.bounds.spec()}"


@dataclass(frozen=True)
class Zipf:
    """``P(k) ∝ k**-a`` on the integers ``[min, max]`` (truncated, not clipped)."""

    a: float
    bounds: Bounds = field(default_factory=lambda: Bounds(1, ZIPF_DEFAULT_MAX))

    def __post_init__(self) -> None:
        _require(self.a > 0, "zipf", "a", "a number > 0", self.a)
        high = self.bounds.high
        _require(high is not None, "zipf", "max", "an integer (zipf needs a bounded support)", high)
        _require(self.bounds.low >= 1, "zipf", "min", "an integer >= 1", self.bounds.low)
        support = (high or 0) - self.bounds.low + 1
        _require(support <= _ZIPF_MAX_SUPPORT, "zipf", "max", f"at most min + {_ZIPF_MAX_SUPPORT - 1}", high)

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        cdf = _zipf_cdf(self.a, self.bounds.low, self.bounds.high or self.bounds.low)
        index = np.searchsorted(cdf, rng.random(n), side="right")
        return (np.minimum(index, len(cdf) - 1) + self.bounds.low).astype(np.int64)

    def describe(self) -> str:
        return f"zipf:a={self.a:g}{self.bounds.spec()}"


def _zipf_cdf(a: float, low: int, high: int) -> npt.NDArray[np.float64]:
    # Relative to the first (k / low)**-a, which is 1: k**-a alone underflows to 0 for every k when a is
    # large (a=2000 from 1000), and the normalised sum was NaN.
    weights = (np.arange(low, high + 1, dtype=np.float64) / low) ** -a
    cdf: npt.NDArray[np.float64] = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


@dataclass(frozen=True)
class Empirical:
    """Draws with replacement from observed values (``source`` says where they came from)."""

    values: tuple[int, ...]
    bounds: Bounds = field(default_factory=Bounds)
    source: str = "values"

    def __post_init__(self) -> None:
        _require(len(self.values) > 0, "empirical", "values", "a non-empty list of numbers", "[]")

    def sample(self, n: int, rng: np.random.Generator) -> IntArray:
        pool = np.asarray(self.values, dtype=np.float64)
        return self.bounds.clip(pool[rng.integers(0, len(pool), size=n)])

    def describe(self) -> str:
        return f"empirical:{self.source}{self.bounds.spec()}"


# --- parsing -----------------------------------------------------------------------------------------

_NUMBER_SPLIT = re.compile(r"[\s,;]+")


def read_numbers(path: str | Path) -> tuple[int, ...]:
    """Token counts from a text file: numbers separated by whitespace, commas or semicolons; ``#``
    starts a comment. Errors name the file, line and bad value."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read lengths file {path}: {exc.strerror}") from exc
    values: list[int] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        for word in _NUMBER_SPLIT.split(line.split("#", 1)[0].strip()):
            if word:
                values.append(_parse_count(word, f"{path}:{line_no}"))
    if not values:
        raise ValueError(f"lengths file {path} holds no numbers")
    return tuple(values)


def _parse_count(word: str, where: str) -> int:
    try:
        value = float(word)
    except ValueError:
        raise ValueError(f"{where}: {word!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: {word!r} is not a token count (a finite number >= 0)")
    return round(value)


def _require(ok: bool, kind: str, name: str, expected: str, got: object) -> None:
    if not ok:
        raise ValueError(f'{kind}: field "{name}" must be {expected}, got {got!r}')


def _above_min(kind: str, name: str, high: int, bounds: Bounds) -> None:
    """Lengths wholly below their ``min`` (``fixed:0`` against the default ``min`` of 1) would all be
    clipped to it: refused, so that the lengths sent are the ones asked for."""
    if high < bounds.low:
        raise ValueError(
            f'{kind}: field "{name}" ({high}) is below "min" ({bounds.low}): every length would be '
            f"clipped to {bounds.low} (set min to allow it)"
        )


_Builder = Callable[[Mapping[str, Any], Bounds], LengthDistribution]


def _num(params: Mapping[str, Any], kind: str, name: str, integer: bool = False) -> Any:
    if name not in params:
        raise ValueError(f'{kind}: missing field "{name}"')
    raw = params[name]
    expected = "an integer" if integer else "a number"
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f'{kind}: field "{name}" must be {expected}, got {raw!r}') from None
    if isinstance(raw, bool) or not math.isfinite(value) or (integer and value != int(value)):
        raise ValueError(f'{kind}: field "{name}" must be {expected}, got {raw!r}')
    return int(value) if integer else value


def _empirical(params: Mapping[str, Any], bounds: Bounds) -> LengthDistribution:
    has_file, has_values = "file" in params, "values" in params
    if has_file == has_values:
        raise ValueError('empirical: give exactly one of the fields "file" or "values"')
    if has_file:
        path = str(params["file"])
        return Empirical(read_numbers(path), bounds, source=f"file={path}")
    raw = params["values"]
    if isinstance(raw, str):
        raw = [w for w in _NUMBER_SPLIT.split(raw) if w]
    if not isinstance(raw, Sequence):
        raise ValueError(f'empirical: field "values" must be a list of numbers, got {raw!r}')
    values = tuple(_parse_count(str(v), f'empirical: field "values" item {i}') for i, v in enumerate(raw))
    return Empirical(values, bounds, source=f"values={len(values)}")


_KINDS: dict[str, tuple[tuple[str, ...], _Builder]] = {
    "empirical": (("file", "values"), _empirical),
    "fixed": (("value",), lambda p, b: Fixed(_num(p, "fixed", "value", True), b)),
    "lognormal": (
        ("median", "sigma"),
        lambda p, b: LogNormal(_num(p, "lognormal", "median"), _num(p, "lognormal", "sigma"), b),
    ),
    "normal": (("mean", "std"), lambda p, b: Normal(_num(p, "normal", "mean"), _num(p, "normal", "std"), b)),
    "uniform": (
        ("low", "high"),
        lambda p, b: Uniform(_num(p, "uniform", "low", True), _num(p, "uniform", "high", True), b),
    ),
    "zipf": (("a",), lambda p, b: Zipf(_num(p, "zipf", "a"), b)),
}
DISTRIBUTION_KINDS = tuple(sorted(_KINDS))


def parse_length_spec(spec: str | int | Mapping[str, Any]) -> LengthDistribution:
    """A distribution from ``"kind:field=value,..."``, a bare integer (fixed), or a mapping with ``kind``."""
    if isinstance(spec, bool):
        raise ValueError(f"a length spec must be a string, an integer or a mapping, got {spec!r}")
    if isinstance(spec, int):
        return Fixed(spec)
    params = _spec_mapping(spec)
    kind = str(params.pop("kind", "")).strip().lower()
    if kind not in _KINDS:
        raise ValueError(f'unknown length distribution "{kind}"; valid: {", ".join(DISTRIBUTION_KINDS)}')
    fields, build = _KINDS[kind]
    valid = (*fields, "max", "min")
    unknown = sorted(k for k in params if k not in valid)
    if unknown:
        raise ValueError(f'{kind}: unknown field "{unknown[0]}"; valid: {", ".join(sorted(valid))}')
    return build(params, _bounds(params, kind))


def _spec_mapping(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return {str(k): v for k, v in spec.items()}
    if not isinstance(spec, str):
        raise ValueError(f"a length spec must be a string, an integer or a mapping, got {spec!r}")
    text = spec.strip()
    if re.fullmatch(r"\d+", text):
        return {"kind": "fixed", "value": text}
    kind, _, rest = text.partition(":")
    if kind.strip().lower() not in _KINDS:  # before its fields: "fixd:512" is a misspelt kind
        raise ValueError(f'unknown length distribution "{kind}"; valid: {", ".join(DISTRIBUTION_KINDS)}')
    params: dict[str, Any] = {"kind": kind}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        name, eq, value = item.partition("=")
        if not eq:
            if kind.strip().lower() == "fixed" and "value" not in params:
                params["value"] = name
                continue
            raise ValueError(f'{kind}: expected field=value, got "{item}"')
        params[name.strip()] = value.strip()
    return params


def _bounds(params: Mapping[str, Any], kind: str) -> Bounds:
    default = Bounds(1, ZIPF_DEFAULT_MAX) if kind == "zipf" else Bounds()
    low = _num(params, kind, "min", True) if "min" in params else default.low
    high = _num(params, kind, "max", True) if "max" in params else default.high
    try:
        return Bounds(low, high)
    except ValueError as exc:
        raise ValueError(f"{kind}: {exc}") from None


def length_spec(value: Any) -> LengthDistribution:
    """A length spec as YAML or JSON gives it: a string, an integer or a mapping (``parse_length_spec``)."""
    if not isinstance(value, str | int | Mapping):
        raise ValueError(f"must be a length spec like lognormal:median=128,sigma=0.5, got {show(value)}")
    return parse_length_spec(value)


@dataclass(frozen=True)
class PairedLengths:
    """(prompt, output) pairs of a trace, drawn together with replacement."""

    prompts: tuple[int, ...]
    outputs: tuple[int, ...]
    source: str = "trace"

    def __post_init__(self) -> None:
        if not self.prompts or len(self.prompts) != len(self.outputs):
            raise ValueError(
                f"{self.source}: paired lengths need as many prompt as output lengths, and at least one "
                f"(got {len(self.prompts)} and {len(self.outputs)})"
            )

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        rows = rng.integers(0, len(self.prompts), size=n)
        prompts = np.asarray(self.prompts, dtype=np.int64)
        return prompts[rows], np.asarray(self.outputs, dtype=np.int64)[rows]

    def describe(self) -> str:
        return f"{self.source} ({len(self.prompts)} pairs)"
