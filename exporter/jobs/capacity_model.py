"""The engine model of a capacity search, from its trials so far (pure): the prediction that places
its next trials (``exporter.stats.engine_model``), and what its trials said of each prediction made
before them.

Only a rate search is predicted: a concurrency holds the requests in flight, not a rate, so Little's
law closes differently there (and the live searches that need it most are rate searches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from exporter.stats.engine_model import (
    DecodeBins,
    Prediction,
    TrialPoint,
    fit_decode_line,
    pooled,
    predict_knee,
)


@dataclass(frozen=True)
class EngineSample:
    """What a trial showed of the engine: decode gaps by running requests, output tokens per request."""

    decode: DecodeBins
    output_tokens: float

    @staticmethod
    def of(figures: dict[str, Any]) -> EngineSample | None:
        """From a trial's figures (``exporter.jobs.trial_verdict.engine_figures``), None without them."""
        raw = figures.get("engine") or {}
        bins = DecodeBins.of(raw.get("decode"))
        tokens = raw.get("output_tokens")
        if bins is None or not isinstance(tokens, int | float) or not tokens > 0.0:
            return None
        return EngineSample(bins, float(tokens))


class Searched(Protocol):
    """What the model needs of a search's settings (``capacity_search.SearchSettings``): whether its
    loads are concurrencies. A protocol, so the model imports nothing of the search that asks it."""

    @property
    def integer(self) -> bool: ...


class Seen(Protocol):
    """What the model needs of a trial as the search saw it (``capacity_search.Observation``)."""

    @property
    def load(self) -> float: ...

    @property
    def passed(self) -> bool: ...

    @property
    def headroom(self) -> float: ...

    @property
    def engine(self) -> EngineSample | None: ...


def predict(settings: Searched, history: Sequence[Seen]) -> Prediction | None:
    """The capacity the trials' engine model predicts (None: a concurrency search, or too little to
    fit). Every trial's gaps are pooled; each trial is one point of the knee's calibration."""
    if settings.integer:
        return None
    samples = [(o, o.engine) for o in history if o.engine is not None]
    if not samples:
        return None
    tokens = sum(s.output_tokens for _, s in samples) / len(samples)
    # A stream's gaps share its waits: about one independent sample per stream.
    line = fit_decode_line(pooled([s.decode for _, s in samples]), effective=tokens)
    if line is None:
        return None
    points = [TrialPoint(o.load, o.headroom, s.output_tokens) for o, s in samples]
    found = predict_knee(line, points)
    return found if found is not None and math.isfinite(found.load) and found.load > 0.0 else None


@dataclass(frozen=True)
class Contradiction:
    """A trial whose measured verdict went against the prediction made before it, outside its interval."""

    trial: int  # 1-based, in the order run
    load: float
    predicted: float
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial, "load": self.load, "predicted": self.predicted,
            "expected": "fail" if self.passed else "pass", "measured": "pass" if self.passed else "fail",
        }  # fmt: skip


def contradictions(settings: Searched, history: Sequence[Seen]) -> list[Contradiction]:
    """Each trial against the prediction the trials before it made: a pass above its interval or a
    failure below it contradicts it."""
    found = []
    for index, item in enumerate(history):
        before = predict(settings, history[:index])
        if before is None:
            continue
        if (item.passed and item.load > before.high) or (not item.passed and item.load < before.low):
            found.append(Contradiction(index + 1, item.load, before.load, item.passed))
    return found


def prediction_report(
    settings: Searched, history: Sequence[Seen], lower_bound: float | None
) -> dict[str, Any] | None:
    """The last prediction beside the measured bracket: its load and interval, widened to every load
    whose trial contradicted a prediction (the model was wrong there, and says so), how far the
    measured lower bound lies from it, the decode line it came from, and the contradictions."""
    last = predict(settings, history)
    if last is None:
        return None
    against = contradictions(settings, history)
    low = min([last.low, *(c.load for c in against if not c.passed)])
    high = max([last.high, *(c.load for c in against if c.passed)])
    line = last.line
    return {
        "load": last.load,
        "low": low,
        "high": high,
        "widened": low < last.low or high > last.high,
        "error": last.load / lower_bound - 1.0 if lower_bound else None,
        "saturation": last.saturation,
        "decode_line": {
            "fixed_s": line.fixed,
            "per_running_s": line.per_running,
            "r_squared": line.r_squared,
            "gaps": line.gaps,
        },
        "calibration_slope": last.slope,
        "trials": last.trials,
        "contradicted": [c.to_dict() for c in against],
    }
