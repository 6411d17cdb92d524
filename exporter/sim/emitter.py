"""The central emission scheduler: runs callbacks at precise monotonic times on the event loop.

Why not ``loop.call_at`` or ``asyncio.sleep``: epoll's timeout has whole-millisecond resolution, so asyncio
timers wake up to 1 ms late. A Linux ``timerfd`` armed (absolute, ``CLOCK_MONOTONIC``, the clock behind
``time.monotonic`` and ``loop.time``) at the earliest due time makes the loop's epoll return on an fd event
with the kernel's high-resolution timer instead, which fixes the median. One timer serves every stream:
callbacks are kept in a heap, and each wake-up runs everything due, so 500 streams cost one fd, not 500
timers. Python 3.11 has no ``os.timerfd_create`` (3.13 does), so it is called through ``ctypes``; where that
is unavailable (not Linux, or a sandbox that forbids it) the scheduler falls back to ``loop.call_at``.

``LatenessRecorder`` (opt-in) keeps (intended, actual) write times so the benchmark can report lateness of
real SSE writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import heapq
import itertools
import logging
import os
import time
from array import array
from collections.abc import Callable

log = logging.getLogger(__name__)

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


class TimerFd:
    """A non-blocking Linux timerfd on CLOCK_MONOTONIC, armed at absolute times."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._settime = libc.timerfd_settime
        self.fd: int = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")

    def arm(self, when: float) -> None:
        """Fire at monotonic time ``when`` (never 0, which would disarm)."""
        sec, frac = divmod(max(when, 1e-6), 1.0)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(int(sec), int(frac * 1e9)))
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def drain(self) -> None:
        """Consume the expiry count so the fd stops being readable."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        """Release the fd."""
        os.close(self.fd)


class LatenessRecorder:
    """Intended and actual times of writes, in two flat arrays (cheap to append at 20k/s)."""

    def __init__(self) -> None:
        self.intended = array("d")
        self.actual = array("d")

    def record(self, intended: float, actual: float) -> None:
        """One write that was due at ``intended`` and happened at ``actual``."""
        self.intended.append(intended)
        self.actual.append(actual)

    def take(self) -> tuple[array[float], array[float]]:
        """The (intended, actual) times recorded so far; clears the recorder."""
        taken = (self.intended, self.actual)
        self.intended = array("d")
        self.actual = array("d")
        return taken


Callback = Callable[[], None]


class Emitter:
    """Runs callbacks at monotonic due times from one heap and one timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, use_timerfd: bool = True) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, Callback]] = []
        self._seq = itertools.count()
        self._armed_at = float("inf")
        self._handle: asyncio.TimerHandle | None = None
        self._timerfd = self._open_timerfd() if use_timerfd else None
        self._dispatching = False
        self.errors = 0

    def _open_timerfd(self) -> TimerFd | None:
        try:
            timer = TimerFd()
            self.loop.add_reader(timer.fd, self._on_timerfd)
        except (OSError, AttributeError, NotImplementedError) as exc:
            log.info("timerfd unavailable (%s); falling back to asyncio timers", exc)
            return None
        return timer

    @property
    def precise(self) -> bool:
        """Whether a timerfd drives the scheduler."""
        return self._timerfd is not None

    def call_at(self, when: float, callback: Callback) -> None:
        """Run ``callback`` at monotonic time ``when`` (at once if that has passed)."""
        heapq.heappush(self._heap, (when, next(self._seq), callback))
        # While dispatching, re-arming is left to the end of the batch: one syscall instead of hundreds.
        if when < self._armed_at and not self._dispatching:
            self._arm(when)

    def _arm(self, when: float) -> None:
        self._armed_at = when
        if self._timerfd is not None:
            self._timerfd.arm(when)
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self.loop.call_at(when, self._run_due)

    def _on_timerfd(self) -> None:
        assert self._timerfd is not None
        self._timerfd.drain()
        self._run_due()

    def _run_due(self) -> None:
        self._armed_at = float("inf")
        self._handle = None
        heap = self._heap
        now = time.monotonic()
        self._dispatching = True
        while heap and heap[0][0] <= now:
            _, _, callback = heapq.heappop(heap)
            try:
                callback()
            except Exception:
                self.errors += 1
                log.exception("emission callback failed")
            if not heap or heap[0][0] > now:
                now = time.monotonic()
        self._dispatching = False
        if heap:
            self._arm(heap[0][0])

    def close(self) -> None:
        """Stop the timer; pending callbacks are dropped."""
        self._heap.clear()
        if self._handle is not None:
            self._handle.cancel()
        if self._timerfd is not None:
            self.loop.remove_reader(self._timerfd.fd)
            self._timerfd.close()
            self._timerfd = None
