"""The scheduled jobs' tasks while they run, so that a shutdown can let them finish within a grace
period and then cancel the rest; the ones it cancels end quietly, not as a bug with its traceback."""

from __future__ import annotations

import asyncio
import logging

from exporter.daemon.scheduler import JobFunction

LOG = logging.getLogger(__name__)


class RunningJobs:
    """The tasks of the jobs ``tracked`` wraps, while they run."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[object]] = set()
        self._stopping = False  # set by stop(): the jobs the shutdown cancels end quietly

    def tracked(self, job: JobFunction) -> JobFunction:
        """``job``, its task kept while it runs, so a shutdown can let it finish (or cancel it)."""

        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await job()
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                # Our own shutdown ended it after the grace period: a normal end, not a job error for
                # the scheduler to log as a bug with a traceback.
                LOG.debug("job cancelled by the shutdown")
            finally:
                if task is not None:
                    self._running.discard(task)

        return run

    def stop(self) -> None:
        """A shutdown began: the jobs it cancels from now on end quietly."""
        self._stopping = True

    async def finish(self, grace_s: float) -> None:
        """Give the jobs in flight ``grace_s`` to finish, then cancel the rest and wait for them."""
        running = list(self._running)
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
