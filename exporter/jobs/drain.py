"""Before a trial: wait, bounded, until the engine has finished what the previous trial left.

A request abandoned at a timeout or by an early stop can keep running in an engine until it notices
the closed connection, and a trial that starts on such an engine measures the previous trial's
leftovers (seen in CI: every trial after an overloaded one failed in its first two requests). So a
trial starts on a drained engine: when the engine's own metrics can be read, until they show nothing
running or waiting (``busy()`` returns running + waiting, None when it cannot tell); else, our own
requests having ended already (a trial cancels and awaits every send before it returns), after a
settling pause. Either way the wait is bounded by ``max_wait_s`` and reported.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Busy = Callable[[], Awaitable[float | None]]
SETTLE_S = 2.0  # without engine metrics: a pause for the engine to notice closed connections
MAX_WAIT_S = 120.0  # a drain wait never takes longer (an engine busy with others' load never drains)
POLL_S = 1.0


@dataclass(frozen=True)
class Drained:
    """How long the wait took and how it ended: "engine_idle", "settled" (no engine metrics: the pause)
    or "max_wait" (the engine still showed requests when the bound was reached)."""

    waited_s: float
    how: str


async def wait_drained(
    busy: Busy | None,
    *,
    max_wait_s: float = MAX_WAIT_S,
    settle_s: float = SETTLE_S,
    poll_s: float = POLL_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Drained:
    """Wait until ``busy()`` reads 0 (polling every ``poll_s``), or for ``settle_s`` when it cannot
    tell (None), at most ``max_wait_s`` in all."""
    began = clock()
    while True:
        load = await busy() if busy is not None else None
        waited = clock() - began
        if load is None:
            pause = max(min(settle_s, max_wait_s - waited), 0.0)
            await sleep(pause)
            return Drained(clock() - began, "settled")
        if load <= 0:
            return Drained(waited, "engine_idle")
        if waited + poll_s > max_wait_s:
            return Drained(waited, "max_wait")
        await sleep(poll_s)
