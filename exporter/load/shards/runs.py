"""One sharded run as the coordinator tracks it (``ShardRun``), and how the shards' event posts update it.

Apart from the pool (``pool``), which serves the endpoints and drives runs: this is the state of
one run (its tasks, each shard's ``ShardState``, the start instant, the stop and abort flags) and the
stand-in ``ProbeResult`` per request started, replaced in place by the final one as events arrive, with
the caller's hooks fed on the way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.load.shards.reports import ShardState
from exporter.load.shards.tasks import ShardTask, copy_into, result_from_json
from exporter.streams.request import RequestSpec
from exporter.streams.result import ProbeResult

Hook = Callable[[int, ProbeResult], None]


@dataclass(frozen=True)
class ShardHooks:
    """What the caller of a sharded run hears, by plan index: each request's start and its result; and
    its ``stop``, which once set tells the shards to stop (what they cancel comes back cancelled)."""

    on_start: Hook | None = None
    on_result: Hook | None = None
    stop: asyncio.Event | None = None


@dataclass
class ShardRun:
    """One run dealt over the pool: its tasks and specs, the caller's hooks, each shard's state, the
    results so far (plan index -> result) and the indexes the shards cancelled."""

    id: str
    tasks: dict[int, ShardTask]
    specs: dict[int, RequestSpec]
    hooks: ShardHooks
    states: dict[int, ShardState]
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    all_done: asyncio.Event = field(default_factory=asyncio.Event)
    start_at: float | None = None
    origin: float | None = None
    stop: bool = False
    aborted: bool = False
    results: dict[int, ProbeResult] = field(default_factory=dict)
    cancelled: set[int] = field(default_factory=set)

    def check(self) -> None:
        live = [s for s in self.states.values() if s.gone is None]
        if all(s.ready for s in live):
            self.all_ready.set()
        if all(s.done for s in live):
            self.all_done.set()

    def start(self, delay: float) -> None:
        # Taken together: the wall-clock instant for the shards, its monotonic twin for this process.
        self.start_at, self.origin = time.time() + delay, time.perf_counter() + delay
        self.started.set()

    def apply_events(self, state: ShardState, body: dict[str, Any]) -> None:
        origin = self.origin or 0.0
        for index, scheduled in body.get("started", ()):
            self.stand_in(int(index), origin + float(scheduled))
        for index, first in body.get("first_tokens", ()):
            result = self.results.get(int(index))
            if result is not None and not result.token_times:
                result.token_times = [origin + float(first)]  # until the final result comes
        for index, cancelled, data in body.get("results", ()):
            self.finish(state, int(index), bool(cancelled), result_from_json(data, origin))

    def stand_in(self, index: int, scheduled: float) -> ProbeResult:
        spec = self.specs[index]
        result = ProbeResult(
            api=next(iter(self.tasks.values())).settings.api, scheduled_at=scheduled,
            max_tokens=spec.max_tokens, prompt_tokens_intended=spec.prompt_tokens,
        )  # fmt: skip
        self.results[index] = result
        if self.hooks.on_start is not None:
            self.hooks.on_start(index, result)
        return result

    def finish(self, state: ShardState, index: int, cancelled: bool, final: ProbeResult) -> None:
        held = self.results.get(index)
        if held is None:
            held = self.stand_in(index, final.scheduled_at or 0.0)
        extra = held.extra
        copy_into(held, final)
        held.extra = {**final.extra, **extra}
        if cancelled:
            self.cancelled.add(index)
            return
        state.results += 1
        state.unreliable += int(final.unreliable)
        if self.hooks.on_result is not None:
            self.hooks.on_result(index, held)
