"""What a sharded run reports: each shard's figures and fate, its results in plan order, and the problems
that make the run unfit to judge as if one process had run it (pure data and a pure rule)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.settings.shards import PoolSettings
from exporter.streams.result import ProbeResult

# One flagged result shows a stall of the machine, not a shard short of CPU: at the 5-10 results of a
# small run's shard it is 10-20%, over the share (seen in a CI run on this 2-core VM with other tests
# beside it: `bench --workers 2` of 20 requests warned that its shard was saturated for one flagged
# result, and a daemon's sharded trial of 10 failed its job, likely so). Saturation flags many. The
# run still counts every flagged result where it judges its timings (load.health, jobs.capacity_result).
SATURATION_FREE = 1


@dataclass
class ShardState:
    """What one shard of a run did."""

    shard: int
    requests: int = 0
    late_s: float | None = None
    last_seen: float = field(default_factory=time.monotonic)
    ready: bool = False
    done: bool = False
    gone: str | None = None  # why it is dead
    stats: dict[str, Any] = field(default_factory=dict)
    results: int = 0
    unreliable: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard": self.shard, "requests_dealt": self.requests, "start_lateness_s": self.late_s,
            "results": self.results, "unreliable": self.unreliable, "done": self.done, "gone": self.gone,
            **{k: v for k, v in self.stats.items() if k in ("cpu_s", "wall_s", "requests", "ended_by")},
        }  # fmt: skip


def shard_problems(states: Sequence[ShardState], settings: PoolSettings) -> list[str]:
    """Why a run cannot be judged as if one process had run it: a shard late to start, dead, never
    ready, or saturated (pure)."""
    problems = []
    for s in states:
        if s.gone is not None:
            problems.append(f"shard {s.shard} {s.gone}")
        elif not s.ready:
            problems.append(f"shard {s.shard} was not ready within {settings.ready_timeout_s:g} s")
        elif not s.done:
            problems.append(f"shard {s.shard} did not report its end")
        if s.late_s is not None and s.late_s > settings.max_start_lateness_s:
            problems.append(
                f"shard {s.shard} started {s.late_s:.3f} s late (bound {settings.max_start_lateness_s:g} s)"
            )
        if s.unreliable > max(settings.max_unreliable_share * s.results, SATURATION_FREE):
            problems.append(
                f"shard {s.shard} was saturated: {s.unreliable} of {s.results} results unreliable "
                f"(bound {settings.max_unreliable_share:.0%}, and more than {SATURATION_FREE})"
            )
    return problems


@dataclass
class ShardRunReport:
    """A run's shards and results: ``results`` maps plan index -> result (cancelled ones included)."""

    states: list[ShardState]
    results: dict[int, ProbeResult]
    cancelled: set[int]
    problems: list[str]
    origin: float | None

    @property
    def cut_by_duration(self) -> bool:
        """Whether the duration left any shard's entries unsent: the merged run then ended by its
        duration, as one process's would (its sends are the shards' sends, merged)."""
        return any(s.stats.get("ended_by") == "duration" for s in self.states)

    def in_order(self) -> list[ProbeResult]:
        """Every finished (not cancelled) result, in plan order: what one process would return."""
        return [self.results[i] for i in sorted(self.results) if i not in self.cancelled]

    def to_dict(self) -> dict[str, Any]:
        return {"shards": [s.to_dict() for s in self.states], "problems": self.problems}
