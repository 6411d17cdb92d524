"""How late the daemon's event loop wakes up: a busy loop delays every timestamp taken on it that the
kernel does not take itself (TLS reads, timers, scheduling), so the daemon exports it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

INTERVAL_S = 0.5


class LoopLagWatcher:
    """Sleeps ``interval_s`` at a time and hands ``observe`` how much later than asked it woke."""

    def __init__(
        self,
        observe: Callable[[float], None],
        *,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._observe = observe
        self._interval_s = interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self) -> None:
        while True:
            expected = self._clock() + self._interval_s
            await asyncio.sleep(self._interval_s)
            self._observe(max(self._clock() - expected, 0.0))
