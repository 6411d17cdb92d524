"""On-demand probes' deadlines, which a shutdown brings forward.

A ``/probe`` runs within its scrape's timeout. When a shutdown begins, every on-demand probe in flight
has ``grace_s`` left at most, so that it answers its scraper (as failed, ``shutdown``) before the web
server stops waiting for it: the web server waited its own grace for such a probe, cancelled it, waited
again and closed the connection with no answer (11.7 s to stop, and the scraper got nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from exporter.streams.result import ProbeCutError, ProbeRun


class OnDemandDeadlines:
    """The deadlines of on-demand probes in flight, and those of them a shutdown brought forward."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s  # what a shutdown leaves a probe in flight, at most
        self.in_flight: set[asyncio.Timeout] = set()
        self._cut: set[asyncio.Timeout] = set()  # those of them a shutdown brought forward
        self.shutting_down = False  # a shutdown began: on-demand probes have grace_s left

    async def run(self, probe: Callable[[], Awaitable[ProbeRun]], timeout_s: float) -> ProbeRun:
        """``probe()`` within ``timeout_s`` (a ``TimeoutError`` past it) or, once a shutdown began,
        ``grace_s`` (a ``ProbeCutError`` when that, not its own deadline, ended it: ``cut``)."""
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                if self.shutting_down:
                    self._cut_short(deadline)
                self.in_flight.add(deadline)
                return await probe()
        except TimeoutError:
            if deadline in self._cut:
                raise ProbeCutError("the exporter shut down while the probe ran") from None
            raise
        finally:
            self.in_flight.discard(deadline)
            self._cut.discard(deadline)

    def cut(self) -> None:
        """A shutdown began: every on-demand probe in flight, and any that starts, has ``grace_s`` left."""
        self.shutting_down = True
        for deadline in self.in_flight:
            self._cut_short(deadline)

    def _cut_short(self, deadline: asyncio.Timeout) -> None:
        """Bring ``deadline`` forward to ``grace_s`` from now, unless it is sooner already or expiring (a
        deadline that fired a moment ago stays in ``in_flight`` until its probe's task runs again, and
        may not be moved: moving it ends the shutdown in a traceback)."""
        if deadline.expired():
            return
        latest = asyncio.get_running_loop().time() + self.grace_s
        when = deadline.when()
        if when is None or latest < when:
            deadline.reschedule(latest)
            self._cut.add(deadline)
