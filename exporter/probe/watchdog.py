"""Per-request time limits (time to first token, idle gap, total) enforced by one lazily re-armed timer.

A timer per socket read would cost a timer handle per chunk; instead the watchdog sleeps until the
earliest limit *could* have passed, then looks at the request's state (``StreamState.has_token`` and
``last_read``) and either ends the request, by handing its reader the failure (``StreamReader.expire``),
or sleeps again until the new earliest limit. No
``asyncio.timeout`` scope per request (~5 us each): the only wait it would interrupt is the reader's,
and the connect step bounds its own wait by ``remaining`` (a fresh connection counts towards the time to
the first token, as a user's does).

The earliest limit moves earlier once, when the first token arrives (the time-to-first-token limit
gives way to the idle limit, which may be much shorter): the reader then calls ``rearm``, so a stall
right after the first token is caught at ``idle``, not at ``ttft``. (Waking every ``idle`` seconds
until the first token instead would save that call but cost a wake-up per ``idle`` per waiting request,
a busy loop for a limit of a few milliseconds.)
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from exporter.streams.decoder import StreamFailureError, StreamState
from exporter.streams.request import Timeouts
from exporter.streams.result import Outcome

Clock = Callable[[], float]
Expire = Callable[[StreamFailureError], None]


class Watchdog:
    """Enforces the ttft, idle and total limits of one request with one timer, re-armed lazily: it
    checks only when the earliest limit could have passed, so reads cost no timer work."""

    def __init__(self, timeouts: Timeouts, clock: Clock, sent_at: float, state: StreamState) -> None:
        self._timeouts = timeouts
        self._clock = clock
        self._sent_at = sent_at
        self._state = state
        self._on_expire: Expire | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expired = False  # a limit passed (the request was told)

    def start(self, on_expire: Expire) -> None:
        """Watch the request: once a limit passes, ``on_expire`` gets the failure (at once, when one
        already has)."""
        self._on_expire = on_expire
        self._check()

    def cancel(self) -> None:
        """Stop watching (the request ended). Forgets the reader's ``expire`` too: the reader holds
        ``rearm``, and the cycle would leave every request for the garbage collector, whose pauses
        (several ms per collection at 300 streams) delay reads."""
        self._on_expire = None
        self._stop_timer()

    def _stop_timer(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def rearm(self) -> None:
        """Look again now: the earliest limit may have moved earlier (the first token arrived)."""
        if self._on_expire is None or self._expired:
            return
        self._stop_timer()
        self._check()

    def remaining(self) -> tuple[float, Outcome]:
        """The seconds left until the earliest limit (``math.inf``: none), and which limit it is."""
        limit, reason = self._limit()
        return limit - self._clock(), reason

    def failure(self, reason: Outcome) -> StreamFailureError:
        """The failure that ends a request when the limit ``reason`` passes."""
        t = self._timeouts
        seconds = {Outcome.TTFT_TIMEOUT: t.ttft, Outcome.IDLE_TIMEOUT: t.idle, Outcome.TOTAL_TIMEOUT: t.total}
        return StreamFailureError(reason, f"{reason.value} after {seconds[reason]} s")

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
        if now >= limit:
            assert self._on_expire is not None
            self._expired = True
            self._on_expire(self.failure(reason))
            return
        self._handle = asyncio.get_running_loop().call_later(limit - now, self._check)
