"""Options and results of deadline accounting, shared by the fluidity engines.

``FluidityOptions`` says how deadlines are counted (the defaults are the Etalon paper's algorithm);
``FluidityBatch`` holds per-request counts and stall statistics; ``RequestFluidity`` is one request's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from exporter.stats.batch import FloatArray, IntArray

Variant = Literal["deadlines", "tokens"]
VARIANTS: tuple[Variant, ...] = ("deadlines", "tokens")

Deadline = float | FloatArray
"""A deadline in seconds: one value for every request, or one per request."""


@dataclass(frozen=True)
class FluidityOptions:
    """How deadlines are counted; the defaults are the Etalon paper's algorithm."""

    ignore_first_token: bool = False
    slack_cap: float | None = None
    variant: Variant = "deadlines"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f'unknown fluidity variant "{self.variant}"; valid: {", ".join(VARIANTS)}')
        cap = self.slack_cap
        if cap is not None and not (np.isfinite(cap) and cap >= 0):
            raise ValueError(f"slack_cap must be None or a finite number >= 0 seconds, got {cap!r}")


@dataclass(frozen=True)
class RequestFluidity:
    """Deadline accounting and stall statistics of one request."""

    missed: int
    total: int
    late_events: int
    longest_stall: float
    first_miss_index: int | None
    tokens: int

    @property
    def fluidity(self) -> float:
        """``1 - missed / total``; 1.0 for a request with no deadlines."""
        return 1.0 - self.missed / self.total if self.total else 1.0

    @property
    def first_miss_fraction(self) -> float | None:
        """Where in the stream the first miss happened, as a fraction of the tokens (0 = first token)."""
        return None if self.first_miss_index is None else self.first_miss_index / self.tokens


@dataclass(frozen=True, eq=False)
class FluidityBatch:
    """Per-request deadline accounting for a batch (arrays in request order).

    ``late_events`` counts tokens that arrived late (the frequency of stalls), ``longest_stall`` is the
    longest interval that missed its deadline (0 when none did: their duration), and
    ``first_miss_index`` the token index of the first miss (-1 when none: their timing).
    """

    missed: FloatArray
    total: FloatArray
    late_events: IntArray
    longest_stall: FloatArray
    first_miss_index: IntArray
    tokens: IntArray
    exact_fallbacks: int = 0
    """How many requests sat too close to a deadline for the fast path and went through the exact loop."""

    def __len__(self) -> int:
        return len(self.missed)

    @property
    def fluidity(self) -> FloatArray:
        """Per-request fluidity-index."""
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = self.missed / self.total
        return cast(FloatArray, np.where(self.total > 0, 1.0 - ratio, 1.0))

    @property
    def first_miss_fraction(self) -> FloatArray:
        """Per-request position of the first miss as a fraction of its tokens (NaN when none)."""
        missed_any = self.first_miss_index >= 0
        fraction = self.first_miss_index / np.maximum(self.tokens, 1)
        return cast(FloatArray, np.where(missed_any, fraction, np.nan))

    @property
    def service_level(self) -> float | None:
        """Token-weighted fluidity over all requests: ``1 - sum(missed) / sum(total)``; None when no
        deadline was accounted (no request, or none with a token): a level from no data is no level."""
        total = float(self.total.sum())
        return 1.0 - float(self.missed.sum()) / total if total else None

    def request(self, index: int) -> RequestFluidity:
        """The accounting of one request."""
        first_miss = int(self.first_miss_index[index])
        return RequestFluidity(
            missed=int(self.missed[index]),
            total=int(self.total[index]),
            late_events=int(self.late_events[index]),
            longest_stall=float(self.longest_stall[index]),
            first_miss_index=first_miss if first_miss >= 0 else None,
            tokens=int(self.tokens[index]),
        )

    @classmethod
    def empty(cls, requests: int) -> FluidityBatch:
        """Zeroed accounting for ``requests`` requests, to be filled in by an engine."""
        return cls(
            missed=np.zeros(requests),
            total=np.zeros(requests),
            late_events=np.zeros(requests, dtype=np.int64),
            longest_stall=np.zeros(requests),
            first_miss_index=np.full(requests, -1, dtype=np.int64),
            tokens=np.zeros(requests, dtype=np.int64),
        )

    def set_request(self, index: int, result: RequestFluidity) -> None:
        """Overwrite one request's accounting (used for requests an engine hands to the exact loop)."""
        self.missed[index] = result.missed
        self.total[index] = result.total
        self.late_events[index] = result.late_events
        self.longest_stall[index] = result.longest_stall
        self.first_miss_index[index] = -1 if result.first_miss_index is None else result.first_miss_index
        self.tokens[index] = result.tokens
