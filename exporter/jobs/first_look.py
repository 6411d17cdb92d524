"""A rate search's quick first look at the target: where to start when the job gives no ``start``.

The first trial of a search at 1 req/s (the old default) sends its 220 requests over 224 s, and on the
simulator's 8B model, whose capacity is about 10 req/s, the whole search then took 7 to 9 minutes. A
short closed loop first (``LOOK_CONCURRENCY`` requests in flight, ``LOOK_REQUESTS`` in all, the
search's own lengths) measures the rate the target serves them at (requests completed over the span
from the first send to the last end) and, judged as a trial, its headroom there. The search's first
trial then goes where the search would put the trial after one at that rate (``next_load``): past a
pass by its headroom (2x to 4x), below a failure by it (to a half or a quarter). Measured on the
simulator's 8B model with ShareGPT: served 2.4-2.5 req/s, headroom about 3 (the capacity is ~10.5).
The look's tokens count against the job's budget and its seconds against the search's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from exporter.jobs.capacity_search import next_load
from exporter.jobs.search_state import Observation, SearchSettings
from exporter.jobs.trial import StartedSend, TrialReport, plan_trial, run_trial
from exporter.jobs.trial_verdict import TrialSlo
from exporter.load.workloads import Workload

LOOK_CONCURRENCY = 16
LOOK_REQUESTS = 32  # each slot sends two, so the loop is closed, not one burst
LOOK_LIMIT_S = 60.0  # a slow target's look ends here, judged on what finished
LOOK_SALT = 999_000_000  # prompt texts apart from every trial's (``salt + index * 1_000_000``)


@dataclass(frozen=True)
class FirstLook:
    """What the look saw: the rate it was served at (None: too few requests finished to say), whether
    it met the SLO there and by how much (headroom), how long it took, the tokens it spent."""

    rate: float | None
    passed: bool
    headroom: float
    duration_s: float
    tokens: int
    completed: int

    def describe(self, start: float, unit: str) -> str:
        verdict = "met the SLO" if self.passed else "missed the SLO"
        served = (
            f"served {self.rate:.3g} {unit}, {verdict} (headroom {self.headroom:.2g})"
            if self.rate is not None
            else "too few answers"
        )
        return (
            f"first look: {LOOK_REQUESTS} requests, {LOOK_CONCURRENCY} in flight, {served} in "
            f"{self.duration_s:.1f} s: the search starts at {start:.4g} {unit}"
        )


def look_rate(report: TrialReport) -> float | None:
    """The rate a look's closed loop was served at, or None with fewer than half its requests done
    (a rate over a few quick ones would overstate it)."""
    completed = report.figures.get("completed")
    rate = report.figures.get("offered_rate_per_s")
    if not isinstance(completed, int) or completed < LOOK_REQUESTS // 2:
        return None
    return float(rate) if isinstance(rate, float) and math.isfinite(rate) and rate > 0 else None


async def first_look(
    workload: Workload,
    slo: TrialSlo,
    send: StartedSend,
    *,
    seed: int,
    salt: int,
    limit_s: float = LOOK_LIMIT_S,
) -> FirstLook:
    """Send the look (``send`` as a trial's) and say what rate it was served at."""
    plan = plan_trial(
        workload, float(LOOK_CONCURRENCY), concurrency=True, arrival="poisson", warmup=0,
        requests=LOOK_REQUESTS, seed=seed, salt=salt + LOOK_SALT, early_stop=False, time_limit_s=limit_s,
    )  # fmt: skip
    report = await run_trial(0, plan, slo, send)
    completed = report.figures.get("completed")
    done = completed if isinstance(completed, int) else 0
    return FirstLook(
        look_rate(report), report.passed, report.headroom, report.duration_s, report.tokens, done
    )


def look_start(look: FirstLook, settings: SearchSettings) -> float:
    """The search's start: where it would go after a trial at the look's rate (within ``[floor,
    max_load]``) that fared as the look did, to three significant digits; ``settings.start`` when the
    look could not say."""
    if look.rate is None:
        return settings.start
    seen = min(max(look.rate, settings.min_load), settings.max_load)
    # The look is no trial of the search's: it takes none of ``max_trials`` (one trial would end it).
    unbounded = dataclasses.replace(settings, max_trials=max(settings.max_trials, 2))
    placed = next_load(unbounded, [Observation(seen, look.passed, look.headroom)])
    if placed is None:  # at the ceiling after a pass, at the floor after a failure
        placed = seen
    rounded = float(f"{placed:.3g}")
    return min(max(rounded, settings.min_load), settings.max_load)
