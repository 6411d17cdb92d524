"""What a job is asked to do, and the ceilings every job must stay under: frozen, validated values.

The same parameters come from an HTTP body (``POST /api/v1/jobs/capacity``), a scheduled job in the config
(``jobs.schedules[*].params``) and the CLI, so they are parsed in one place (``exporter.settings.job_parse``)
into these dataclasses. Anything not given falls back to the target's SLO config at run time, which is
why several fields are ``None``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from exporter.settings.slo import SloSpec

JobKind = Literal["capacity", "prefill-profile"]
JOB_KINDS: tuple[JobKind, ...] = ("capacity", "prefill-profile")
LoadKind = Literal["rate", "concurrency"]
LOAD_KINDS: tuple[LoadKind, ...] = ("rate", "concurrency")
DEFAULT_LOW, DEFAULT_HIGH = 128, 16384  # prompt lengths of a prefill profile's default ladder


MIN_TRIAL_S = 10.0  # a capacity trial with less of the time budget left than this is not started


def distinct_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    """``lengths`` as given; a ``ValueError`` names each one given more than once (it would be profiled
    twice, and its minimum TTFT weigh twice in the fit). The one rule of a prefill profile's list, for
    the jobs API and ``--lengths`` alike."""
    repeated = sorted(length for length, count in Counter(lengths).items() if count > 1)
    if repeated:
        raise ValueError(f"{', '.join(map(str, repeated))} given more than once; list each length once")
    return tuple(lengths)


def geometric_ladder(low: int = DEFAULT_LOW, high: int = DEFAULT_HIGH) -> tuple[int, ...]:
    """Powers of two from ``low`` up to ``high`` (both kept): 128, 256, ..., 16384 by default."""
    if not 1 <= low <= high:
        raise ValueError(f"a prompt-length ladder needs 1 <= low <= high, got {low} and {high}")
    steps = math.floor(math.log2(high / low)) + 1
    ladder = [low * 2**k for k in range(steps)]
    return tuple(ladder if ladder[-1] == high else [*ladder, high])


@dataclass(frozen=True)
class JobLimits:
    """Ceilings no job may exceed (``jobs.limits`` in the config). A request asking for more is refused
    with a 400 naming the limit; a running job that reaches ``max_tokens`` or ``max_duration_s`` stops
    and fails with that reason."""

    max_rate: float = 20.0  # requests/s a capacity trial may send (rate searches)
    max_concurrency: int = 64  # requests in flight (concurrency searches)
    max_duration_s: float = 3600.0  # wall time of one job
    max_tokens: int = 5_000_000  # prompt + output tokens one job may spend
    max_trials: int = 12
    max_requests_per_trial: int = 2000
    max_prompt_tokens: int = 32768  # longest prompt a prefill profile may send
    # Client processes a job may use (``jobs.workers``; the daemon bounds it by the container's CPUs).
    max_workers: int = 1


def concurrency_ceiling(warmup_requests: int, requests_per_trial: int) -> int:
    """The highest concurrency a closed-loop trial of this many requests can hold: every slot sends at
    least two of them, so at least half wait for a slot. At or above the trial's request count every
    request starts at once, a burst, not a closed loop (and its offered rate is no rate at all)."""
    return max(1, (warmup_requests + requests_per_trial) // 2)


@dataclass(frozen=True)
class CapacityParams:
    """A capacity search: the highest load at which the SLO holds, to a relative ``tolerance``."""

    target: str
    module: str | None = None  # None: the target's first module
    load: LoadKind = "rate"  # requests/s (open loop, ``arrival`` process) or concurrency (closed loop)
    arrival: str = "poisson"  # an arrival spec without its rate: poisson, constant, gamma:cv=2
    start: float | None = None  # first load tried; None: a rate's first look says, or concurrency 1
    # Never try above this; None: the limit (max_rate / max_concurrency; a concurrency also within
    # ``concurrency_ceiling``)
    max_load: float | None = None
    # Never try below this: a failure here ends the search with "not met"; the start is raised to it
    # (None: see search_settings)
    min_load: float | None = None
    tolerance: float = 0.05
    max_trials: int = 8
    requests_per_trial: int = 200  # measured requests per trial, after the warm-up
    warmup_requests: int = 20
    # A trial ends after this long (None: 1.5x its planned send span + 60 s for rates, none for concurrency)
    trial_duration_s: float | None = None
    time_budget_s: float | None = None  # wall clock of the whole search (None: jobs.limits.max_duration_s)
    confidence: float = 0.95  # of each trial's pass-fraction interval (inconclusive when it straddles)
    early_stop: bool = True  # stop a trial as soon as its outcome is decided
    seed: int = 0
    slo: SloSpec = field(default_factory=SloSpec)
    workers: int | None = None  # client processes sending each trial; None: jobs.workers


@dataclass(frozen=True)
class ProfileParams:
    """A prefill profile: isolated one-token requests across ``lengths``, the minimum TTFT per length."""

    target: str
    lengths: tuple[int, ...] = field(default_factory=geometric_ladder)
    repeats: int = 3
    apply: bool = True  # store the fitted model for the target and use it for its deadlines
    workers: int | None = None  # client processes taking turns (one request at a time); None: jobs.workers


JobParams = CapacityParams | ProfileParams
