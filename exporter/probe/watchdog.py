"""Per-request time limits (time to first token, idle gap, total) enforced by one lazily re-armed timer.

A timer per socket read would cost a timer handle per chunk; instead the watchdog sleeps until the
earliest limit *could* have passed, then looks at the request's state (``StreamState.has_token`` and
``last_read``) and either ends the request, by rescheduling its ``asyncio.timeout`` scope to now, or
sleeps again until the new earliest limit. ``expired`` then says which limit it was.

The earliest limit moves earlier once, when the first token arrives (the time-to-first-token limit
gives way to the idle limit, which may be much shorter): the reader then calls ``rearm``, so a stall
right after the first token is caught at ``idle``, not at ``ttft``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from exporter.probe.result import Outcome
from exporter.probe.stream import StreamState
from exporter.probe.target import Timeouts

Clock = Callable[[], float]


class Watchdog:
    """Enforces the ttft, idle and total limits of one request with one timer, re-armed lazily: it
    checks only when the earliest limit could have passed, so reads cost no timer work."""

    def __init__(self, timeouts: Timeouts, clock: Clock, sent_at: float, state: StreamState) -> None:
        self._timeouts = timeouts
        self._clock = clock
        self._sent_at = sent_at
        self._state = state
        self._scope: asyncio.Timeout | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.expired: Outcome | None = None

    def start(self, scope: asyncio.Timeout) -> None:
        """Watch the request running inside ``scope`` (an ``asyncio.timeout(None)``)."""
        self._scope = scope
        self._check()

    def cancel(self) -> None:
        """Stop watching (the request ended)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def rearm(self) -> None:
        """Look again now: the earliest limit may have moved earlier (the first token arrived)."""
        if self._scope is None or self.expired is not None:
            return
        self.cancel()
        self._check()

    def _limit(self) -> tuple[float, Outcome]:
        t, inf = self._timeouts, math.inf
        if self._state.done:
            return inf, Outcome.OK  # complete: what is left (draining the body) cannot fail it
        total = self._sent_at + t.total if t.total is not None else inf
        if not self._state.has_token:
            limit = self._sent_at + t.ttft if t.ttft is not None else inf
            return (limit, Outcome.TTFT_TIMEOUT) if limit < total else (total, Outcome.TOTAL_TIMEOUT)
        limit = self._state.last_read + t.idle if t.idle is not None else inf
        return (limit, Outcome.IDLE_TIMEOUT) if limit < total else (total, Outcome.TOTAL_TIMEOUT)

    def _check(self) -> None:
        limit, reason = self._limit()
        if limit == math.inf:
            return
        now = self._clock()
        loop = asyncio.get_running_loop()
        if now >= limit:
            assert self._scope is not None
            self.expired = reason
            self._scope.reschedule(loop.time())
            return
        self._handle = loop.call_later(limit - now, self._check)
