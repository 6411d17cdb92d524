"""What an operator needs to know about a failing target: its state, its last error, and a log line for
every change of state, not one per skipped probe.

A target is ``ok``, ``failing`` (its last run failed: nothing completed, or it answered 429; and it
stays failing while the latest run of any of its modules failed, so a module refused on every run
beside a good one is one failure, not a failure and a recovery per interval) or
``backing_off`` (the budget holds its probes back after consecutive failed runs). Each change is logged
once at WARNING, with the cause: the first failure with its outcome and error, a back-off with its delay
and the last error, a recovery with how many runs had failed. While backing off, every run the budget
lets through that fails again starts a new back-off (its delay doubles up to the target's
``max_backoff``, see ``budget.py``): a line is logged only when that delay changes, so a dead target
logs a few lines as its delay grows and none once it has reached the maximum. A failed request inside a
run that still succeeded is logged too, at most once per ``PARTIAL_LOG_INTERVAL_S`` per target, so a
dead target or a flaky one never floods the log. The last error stays for ``/probe?debug=true`` and
``/``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from exporter.exposition.views import iso
from exporter.streams.result import ProbeResult

LOG = logging.getLogger(__name__)
PARTIAL_LOG_INTERVAL_S = 300.0  # at most one line per target this often for failures in good runs

State = Literal["ok", "failing", "backing_off"]


@dataclass(frozen=True)
class LastError:
    """The last failed request of a target: when, in which module, how it ended and why."""

    at: float  # unix seconds
    module: str
    outcome: str
    message: str

    def describe(self) -> str:
        return f"{self.outcome}: {self.message} (module {self.module}, at {iso(self.at)})"


def _error_of(results: Sequence[ProbeResult]) -> tuple[str, str] | None:
    """(outcome, message) of the last failed request of a run, if any failed."""
    for result in reversed(results):
        if not result.ok:
            status = f"HTTP {result.http_status}" if result.http_status is not None else ""
            message = result.error or status or "no detail"
            return result.outcome.value, message
    return None


class TargetHealth:
    """One target's state and last error; ``clock`` is unix seconds."""

    def __init__(self, target: str, clock: Callable[[], float]) -> None:
        self.target = target
        self.clock = clock
        self.state: State = "ok"
        self.since = clock()
        self.failed_runs = 0
        self.last_error: LastError | None = None
        self.resume_at: float | None = None  # unix seconds, while backing off
        self.backoff_s = 0.0  # the delay of the current back-off, 0 when not backing off
        self.failing_modules: set[str] = set()  # modules whose latest run failed
        self._partial_logged_at = float("-inf")

    def observe(
        self, module: str, results: Sequence[ProbeResult], failed_runs: int, backoff_s: float
    ) -> None:
        """Take a finished run: ``failed_runs`` and ``backoff_s`` (0: none) are the budget's verdict."""
        now = self.clock()
        error = _error_of(results)
        if error is not None:
            self.last_error = LastError(now, module, *error)
        if failed_runs == 0:
            self.failing_modules.discard(module)
        else:
            self.failing_modules.add(module)
        if failed_runs == 0 and self.failing_modules:
            # Another module's latest run failed: no recovery of the target yet (a module refused on
            # every run beside a good one logged "failing" and "recovered" at every interval); but its
            # back-off is over, and the next one is news again.
            self.resume_at, self.backoff_s = None, 0.0
            if self.state == "backing_off":
                self._enter("failing", now)
        elif failed_runs == 0:
            self._succeeded(now, results, partial=error is not None)
        elif backoff_s > 0:
            self._backing_off(now, failed_runs, backoff_s)
        else:
            self._failing(now, failed_runs)
        self.failed_runs = failed_runs

    def observe_cut(self, module: str, failed_runs: int, backoff_s: float) -> None:
        """Take a run cut before it ended (its deadline passed, or a shutdown): a failed run with no
        result to show; ``failed_runs`` and ``backoff_s`` are the budget's verdict."""
        message = "the run was cut before it ended (a scrape timeout or a shutdown)"
        self.last_error = LastError(self.clock(), module, "cut", message)
        self.observe(module, (), failed_runs, backoff_s)

    def _succeeded(self, now: float, results: Sequence[ProbeResult], *, partial: bool) -> None:
        if self.state != "ok":
            # A run of another module may have come between: "after 0 failed runs" says nothing.
            after = f" after {self.failed_runs} failed runs" if self.failed_runs else ""
            LOG.warning(
                "target %s recovered%s (last error: %s)",
                self.target,
                after,
                self.last_error.describe() if self.last_error else "none",
            )
            self._enter("ok", now)
            self.backoff_s = 0.0
        elif partial and self.last_error and now - self._partial_logged_at >= PARTIAL_LOG_INTERVAL_S:
            self._partial_logged_at = now
            LOG.warning(
                "target %s: %d of %d requests failed, last %s (logged at most every %.0f s)",
                self.target,
                sum(not r.ok for r in results),
                len(results),
                self.last_error.describe(),
                PARTIAL_LOG_INTERVAL_S,
            )
        self.resume_at = None

    def _failing(self, now: float, failed_runs: int) -> None:
        if self.state == "ok":
            LOG.warning(
                "target %s failing: %s",
                self.target,
                self.last_error.describe() if self.last_error else "every request failed",
            )
            self._enter("failing", now)

    def _backing_off(self, now: float, failed_runs: int, backoff_s: float) -> None:
        # Every failed run after a back-off starts another: only a new delay is news to an operator.
        if self.state != "backing_off" or backoff_s != self.backoff_s:
            LOG.warning(
                "target %s backing off for %.0f s after %d failed runs in a row; last error: %s",
                self.target,
                backoff_s,
                failed_runs,
                self.last_error.describe() if self.last_error else "none",
            )
        self.backoff_s = backoff_s
        self.resume_at = now + backoff_s
        if self.state != "backing_off":
            self._enter("backing_off", now)

    def _enter(self, state: State, now: float) -> None:
        self.state, self.since = state, now

    def retain(self, modules: Iterable[str]) -> None:
        """Forget the failures of modules not in ``modules``: none of them is probed on schedule to
        recover (a reload took it away, an on-demand probe named a module the target is not configured
        with, or the module is skipped as over the served context, which its own alert says)."""
        self.failing_modules &= set(modules)

    def describe(self) -> str:
        """One line for the debug view and the index page."""
        line = f"{self.state} since {iso(self.since)}"
        if self.state != "ok" and self.failed_runs:
            line += f", {self.failed_runs} failed runs in a row"
        if self.failing_modules:
            line += f", failing modules: {', '.join(sorted(self.failing_modules))}"
        if self.state == "backing_off" and self.resume_at is not None:
            line += f", next probe after {iso(self.resume_at)}"
        error = self.last_error.describe() if self.last_error is not None else "none"
        return f"{line}; last error: {error}"
