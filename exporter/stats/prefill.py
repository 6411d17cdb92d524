"""The prefill deadline model: TTFT measured in isolation as a function of prompt length.

Etalon gives the first token a deadline ``Dp(P)`` = predicted prefill time of a ``P``-token prompt plus a
scheduling slack. It predicts prefill time with a random forest, which goes flat outside the profiled
prompt lengths, so a longer prompt than any profiled gets too tight a deadline. Prefill cost is a
fixed overhead, a linear (MLP, projections) and a quadratic (attention) term in ``P``, so we fit

    TTFT(P) = a + b·P + c·P²   with a, b, c >= 0

by non-negative least squares: the curve is then non-negative and non-decreasing for every ``P >= 0``
and grows like attention does beyond the profiled range.

Everything here is pure: ``dump_json``/``parse_json`` turn a model into text and back, and the caller
decides where the text is stored.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from exporter.stats.distribution import percentile

FloatArray = NDArray[np.float64]

MODEL_KIND: Final = "quadratic"
MODEL_VERSION: Final = 1
_FIELDS: Final = ("kind", "version", "coefficients", "prompt_range", "sample_count", "rmse")
_COEFFICIENT_NAMES: Final = ("a", "b", "c")


@dataclass(frozen=True)
class PrefillModel:
    """``TTFT(P) = a + b·P + c·P²`` seconds, fitted on ``sample_count`` prompts in ``prompt_range``."""

    coefficients: tuple[float, float, float]
    prompt_range: tuple[float, float]
    sample_count: int
    rmse: float

    def __post_init__(self) -> None:
        for name, value in zip(_COEFFICIENT_NAMES, self.coefficients, strict=True):
            _check_non_negative(f"coefficients.{name}", value)
        low, high = self.prompt_range
        _check_non_negative("prompt_range[0]", low)
        _check_non_negative("prompt_range[1]", high)
        if low > high:
            raise ValueError(f"prompt_range must be [min, max], got [{low!r}, {high!r}]")
        if self.sample_count < 1:
            raise ValueError(f"sample_count must be >= 1, got {self.sample_count!r}")
        _check_non_negative("rmse", self.rmse)

    @overload
    def predict(self, prompt_length: float) -> float: ...
    @overload
    def predict(self, prompt_length: FloatArray) -> FloatArray: ...
    def predict(self, prompt_length: float | FloatArray) -> float | FloatArray:
        """Predicted prefill time in seconds of prompts of ``prompt_length`` tokens (scalar or array)."""
        p = _prompt_lengths("prompt_length", prompt_length)
        a, b, c = self.coefficients
        predicted = a + p * (b + p * c)
        return float(predicted) if np.ndim(prompt_length) == 0 else predicted

    def formula(self) -> str:
        """The fitted curve as a person reads it: ``TTFT(P) = a + b*P + c*P^2`` with its error."""
        a, b, c = self.coefficients
        return f"TTFT(P) = {a:.4g} + {b:.4g}*P + {c:.4g}*P^2  (rmse {self.rmse:.4g} s)"

    @overload
    def deadline(self, prompt_length: float, scheduling_slack: float = 0.0) -> float: ...
    @overload
    def deadline(self, prompt_length: FloatArray, scheduling_slack: float = 0.0) -> FloatArray: ...
    def deadline(
        self, prompt_length: float | FloatArray, scheduling_slack: float = 0.0
    ) -> float | FloatArray:
        """The first-token deadline ``Dp(P)``: predicted prefill time plus ``scheduling_slack`` seconds."""
        _check_non_negative("scheduling_slack", scheduling_slack)
        return self.predict(prompt_length) + scheduling_slack

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data; ``from_dict`` reads it back."""
        return {
            "kind": MODEL_KIND,
            "version": MODEL_VERSION,
            "coefficients": dict(zip(_COEFFICIENT_NAMES, self.coefficients, strict=True)),
            "prompt_range": list(self.prompt_range),
            "sample_count": self.sample_count,
            "rmse": self.rmse,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrefillModel:
        """Validate ``to_dict`` output; every error names the offending field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"prefill model must be a mapping, got {type(data).__name__}")
        _check_keys("prefill model", data, _FIELDS)
        if data["kind"] != MODEL_KIND:
            raise ValueError(f'prefill model kind must be "{MODEL_KIND}", got {data["kind"]!r}')
        if data["version"] != MODEL_VERSION or isinstance(data["version"], bool):
            raise ValueError(f"prefill model version must be {MODEL_VERSION}, got {data['version']!r}")
        return cls(
            coefficients=_read_coefficients(data["coefficients"]),
            prompt_range=_read_range(data["prompt_range"]),
            sample_count=_read_count(data["sample_count"]),
            rmse=_read_number("rmse", data["rmse"]),
        )


@dataclass(frozen=True)
class PromptBucket:
    """TTFT of the prompts with ``lower <= P < upper`` tokens."""

    lower: float
    upper: float
    count: int
    mean: float
    p99: float


def fit_prefill_model(prompt_lengths: ArrayLike, ttfts: ArrayLike) -> PrefillModel:
    """Fit ``TTFT(P) = a + b·P + c·P²`` with ``a, b, c >= 0`` by exact non-negative least squares."""
    p, y = _samples(prompt_lengths, ttfts)
    # Scaling P to [0, 1] keeps the columns 1, x, x² of similar size; P² alone reaches ~1e10.
    scale = float(np.max(p)) or 1.0
    design = np.column_stack((np.ones_like(p), p / scale, (p / scale) ** 2))
    scaled, residual = nnls_by_support(design, y)
    coefficients = (float(scaled[0]), float(scaled[1] / scale), float(scaled[2] / scale**2))
    return PrefillModel(
        coefficients=coefficients,
        prompt_range=(float(np.min(p)), float(np.max(p))),
        sample_count=len(p),
        rmse=math.sqrt(residual / len(p)),
    )


def nnls_by_support(design: FloatArray, target: FloatArray) -> tuple[FloatArray, float]:
    """Exact non-negative least squares for a few columns: ``argmin |design·x - target|²``, ``x >= 0``.

    Returns the solution and its squared residual. The NNLS optimum is the unconstrained least-squares
    solution on its own support (the KKT conditions make the gradient vanish there), and some optimum
    has linearly independent support columns, so the best feasible support solution over all
    ``2**columns`` supports is the optimum. Exponential in the columns: meant for three.
    """
    columns = design.shape[1]
    best = np.zeros(columns)
    best_residual = float(target @ target)
    for size in range(1, columns + 1):
        for support in itertools.combinations(range(columns), size):
            solution, residual = _support_solution(design, target, support)
            if solution is not None and residual < best_residual:
                best, best_residual = solution, residual
    return best, best_residual


def support_residual(design: FloatArray, target: FloatArray, solution: FloatArray) -> float:
    """The squared residual ``|design·solution - target|²``."""
    error = design @ solution - target
    return float(error @ error)


def ttft_by_prompt_bucket(
    prompt_lengths: ArrayLike, ttfts: ArrayLike, edges: Sequence[float] | None = None
) -> list[PromptBucket]:
    """Mean and p99 TTFT per prompt-length bucket ``[edges[i], edges[i + 1])``; empty buckets omitted.

    Default edges are 0 and the powers of two up to the first one above the longest prompt. Every
    prompt must fall inside the edges.
    """
    p, y = _samples(prompt_lengths, ttfts)
    bounds = _default_edges(float(np.max(p))) if edges is None else _checked_edges(edges)
    _check_inside(p, bounds)
    index = np.searchsorted(bounds, p, side="right") - 1
    return [_bucket(bounds, i, y[index == i]) for i in np.unique(index)]


def dump_json(model: PrefillModel) -> str:
    """The model as JSON text."""
    return json.dumps(model.to_dict(), sort_keys=True, allow_nan=False)


def parse_json(text: str) -> PrefillModel:
    """A model from ``dump_json`` text; errors say what is wrong with it."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except ValueError as error:
        raise ValueError(f"prefill model is not valid JSON: {error}") from error
    return PrefillModel.from_dict(data)


def _support_solution(
    design: FloatArray, target: FloatArray, support: tuple[int, ...]
) -> tuple[FloatArray | None, float]:
    """Least squares on the ``support`` columns, or ``None`` when it has a negative coefficient."""
    sub = design[:, list(support)]
    fitted, *_ = np.linalg.lstsq(sub, target, rcond=None)
    if np.any(fitted < 0.0):
        return None, math.inf
    solution = np.zeros(design.shape[1])
    solution[list(support)] = fitted
    return solution, support_residual(design, target, solution)


def _samples(prompt_lengths: ArrayLike, ttfts: ArrayLike) -> tuple[FloatArray, FloatArray]:
    p = np.asarray(prompt_lengths, dtype=np.float64).reshape(-1)
    y = np.asarray(ttfts, dtype=np.float64).reshape(-1)
    if len(p) != len(y):
        raise ValueError(f"got {len(p)} prompt lengths but {len(y)} TTFTs; they must pair up")
    if len(p) == 0:
        raise ValueError("need at least 1 (prompt length, TTFT) sample, got 0")
    _check_array("prompt length", p)
    _check_array("TTFT", y)
    return p, y


def _check_array(name: str, values: FloatArray) -> None:
    bad = np.flatnonzero(~(values >= 0.0) | ~np.isfinite(values))  # `~(x >= 0)` also catches NaN
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"{name} {i} is {float(values[i])!r}; must be finite and >= 0")


def _prompt_lengths(name: str, prompt_length: float | FloatArray) -> FloatArray:
    p = np.asarray(prompt_length, dtype=np.float64)
    _check_array(name, p.reshape(-1))
    return p


def _check_non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


def _check_keys(what: str, data: Mapping[str, Any], expected: Sequence[str]) -> None:
    unknown = sorted(set(data) - set(expected), key=str)  # YAML keys may be numbers too
    if unknown:
        raise ValueError(f'unknown {what} field "{unknown[0]}"; valid: {", ".join(expected)}')
    missing = [key for key in expected if key not in data]
    if missing:
        raise ValueError(f'{what} is missing field "{missing[0]}"')


def _read_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    _check_non_negative(name, float(value))
    return float(value)


def _read_coefficients(value: Any) -> tuple[float, float, float]:
    if not isinstance(value, Mapping):
        raise ValueError(f"coefficients must be a mapping with keys a, b, c, got {value!r}")
    _check_keys("coefficients", value, _COEFFICIENT_NAMES)
    a, b, c = (_read_number(f"coefficients.{k}", value[k]) for k in _COEFFICIENT_NAMES)
    return a, b, c


def _read_range(value: Any) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"prompt_range must be a list [min, max], got {value!r}")
    return _read_number("prompt_range[0]", value[0]), _read_number("prompt_range[1]", value[1])


def _read_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"sample_count must be an integer, got {value!r}")
    return value


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _default_edges(longest: float) -> FloatArray:
    # Powers of two up to the first one strictly above the longest prompt, so that prompt sits in the
    # last half-open bucket.
    top = max(0, math.floor(math.log2(longest)) + 1) if longest >= 1.0 else 0
    return np.concatenate(([0.0], 2.0 ** np.arange(top + 1)))


def _checked_edges(edges: Sequence[float]) -> FloatArray:
    bounds = np.asarray(edges, dtype=np.float64).reshape(-1)
    if len(bounds) < 2 or not np.all(np.isfinite(bounds)) or np.any(np.diff(bounds) <= 0.0):
        raise ValueError(f"bucket edges must be at least 2 finite, increasing numbers, got {list(edges)!r}")
    return bounds


def _check_inside(p: FloatArray, bounds: FloatArray) -> None:
    outside = int(np.count_nonzero((p < bounds[0]) | (p >= bounds[-1])))
    if outside:
        raise ValueError(
            f"{outside} prompt lengths fall outside the bucket edges [{bounds[0]:g}, {bounds[-1]:g}); "
            "widen the edges"
        )


def _bucket(bounds: FloatArray, i: int, y: FloatArray) -> PromptBucket:
    return PromptBucket(
        lower=float(bounds[i]),
        upper=float(bounds[i + 1]),
        count=len(y),
        mean=float(np.mean(y)),
        p99=percentile(y, 99.0),
    )
