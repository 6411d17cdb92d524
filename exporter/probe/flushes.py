"""``Flushes``: the decoding of every stream's kept reads on one event loop, a bounded share per turn.

Each ``StreamReader`` keeps its reads after the first token and decodes them in batches (``stream_reader.py``),
scheduled when a batch comes due. Every stream of a batched engine gets its token in the same step, so
once their batches come due together they stay in step: each batch's decoding resets its count in the
same turn, and the next batches come due together again. One stall is enough to line them up: every
stream then reads two events at once, and a read of several ends keep mode and triggers the batch
early. Measured on the default ``bench`` (the simulator, ~20 streams of 6.25 ms gaps): bursts of 10-28
batches decoded in one turn of the loop, up to 6 ms of CPU without a poll of the sockets, so a socket
read every 2 ms went unread for a whole gap, two of its chunks were read together under one stamp and
the request was rightly flagged; each such burst lined the streams up again.

So the batches due go into one queue per loop, and one callback decodes them in order for up to
``FLUSH_BUDGET_S`` of the loop's time; the rest wait for the next turn, after the loop has polled its
sockets and run its timers (the paced reads among them). At least one batch is decoded per turn, so
the queue always drains; a batch is at most ``reader.FLUSH_BYTES`` of reads, and what a stream's end
or a time limit settles it decodes at once itself. Why 1 ms: the paced reads come every 2 ms at most,
and a turn longer by the budget and at most one batch past it (the longest measured there: 1 ms)
keeps them within ``saturation.LAG_LIMIT_S`` (3 ms) of their pace. Measured on the same bench
(``bench/default_reliable.py``, interleaved with the code before, 7 runs each): the most batches
decoded while a paced read was 3 ms late or more fell from 9-24 a run to 0-6, and the most CPU the
loop's callbacks used meanwhile from 4.1 to 1.5 ms (medians); the client's CPU per chunk is unchanged
(``probe_ab.py``: 1.004x, 0.98-1.03).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from weakref import WeakKeyDictionary

FLUSH_BUDGET_S = 0.001  # of decoding per turn of the loop, then the rest after a poll of the sockets


class Flushes:
    """The batches of kept reads due on one loop, decoded in the order they came due, at most
    ``budget_s`` of them per turn (and at least one)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        clock: Callable[[], float] = time.perf_counter,
        budget_s: float | None = None,
    ) -> None:
        self._loop = loop
        self._clock = clock
        self.budget_s = FLUSH_BUDGET_S if budget_s is None else budget_s
        self._due: deque[Callable[[], None]] = deque()
        self._scheduled = False

    def add(self, flush: Callable[[], None]) -> None:
        """Run ``flush`` (a batch's decoding) in this turn of the loop if the budget allows, else in a
        later one."""
        self._due.append(flush)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def __len__(self) -> int:
        return len(self._due)

    def _run(self) -> None:
        due, clock = self._due, self._clock
        ends = clock() + self.budget_s
        try:
            while due:
                due.popleft()()
                if clock() >= ends:
                    break
        finally:  # a flush that raised (a bug: readers guard their own) must not strand the others
            if due:
                self._loop.call_soon(self._run)  # after the loop's next poll: a new turn
            else:
                self._scheduled = False


_FLUSHES: WeakKeyDictionary[asyncio.AbstractEventLoop, Flushes] = WeakKeyDictionary()


def loop_flushes(loop: asyncio.AbstractEventLoop) -> Flushes:
    """``loop``'s ``Flushes`` (made on first use)."""
    flushes = _FLUSHES.get(loop)
    if flushes is None:
        flushes = _FLUSHES[loop] = Flushes(loop)
    return flushes
