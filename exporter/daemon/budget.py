"""How much probe traffic a target may still get, and whether to back off while it fails.

Scheduled probes load a production endpoint, so each target has an hourly budget of requests and
tokens (a sliding hour of what was actually sent), and consecutive failed runs (no request completed, or
the target answered 429: it is saturated) make the prober back off exponentially, up to a ceiling, instead of hammering a target that is down.
A decision is a reason to skip (``over_requests``, ``over_tokens``, ``backing_off``) or None: go.

A request is charged when it is sent (``charge``), at its planned cost, and the run settles the tokens
it really cost when it ends (``record``): a run cut by a deadline never ends, and ten on-demand probes
cut at 1 s once sent 500 requests to a target budgeted at 60 an hour, none of them counted. A cut run
is a failed run (``record_cut``). The streak counts runs in a row per module: a target with four modules
that all fail once has failed one run in a row, not four; any module's good run ends every streak.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from exporter.settings.model import Budget
from exporter.streams.result import Outcome, ProbeResult

HOUR_S = 3600.0
FIRST_BACKOFF_S = 30.0


class BudgetTracker:
    """One target's spend over the last hour and its failure streak; ``clock`` is monotonic seconds."""

    def __init__(self, budget: Budget, clock: Callable[[], float]) -> None:
        self.budget = budget
        self.clock = clock
        self.spent: deque[tuple[float, int, int]] = deque()  # (when, requests, tokens)
        self.failed_runs = 0  # the longest streak of failed runs of any one module
        self._streaks: dict[str, int] = {}  # module -> its failed runs in a row
        self.resume_at = 0.0

    def _trim(self, now: float) -> None:
        while self.spent and self.spent[0][0] <= now - HOUR_S:
            self.spent.popleft()

    def skip_reason(self, planned_requests: int, planned_tokens: int) -> str | None:
        """Why the next run must not go now, or None when it may."""
        now = self.clock()
        if now < self.resume_at:
            return "backing_off"
        self._trim(now)
        requests = sum(r for _, r, _ in self.spent) + planned_requests
        tokens = sum(t for _, _, t in self.spent) + planned_tokens
        limit_requests, limit_tokens = self.budget.max_requests_per_hour, self.budget.max_tokens_per_hour
        if limit_requests is not None and requests > limit_requests:
            return "over_requests"
        if limit_tokens is not None and tokens > limit_tokens:
            return "over_tokens"
        return None

    def charge(self, requests: int, tokens: int) -> None:
        """Count a request (a session: its turns) as it is sent, at its planned ``tokens``."""
        self.spent.append((self.clock(), requests, tokens))

    def record(
        self, results: Sequence[ProbeResult], *, module: str = "", charged: tuple[int, int] = (0, 0)
    ) -> float:
        """Settle a finished run of ``module`` (``charged``: the requests and tokens ``charge`` counted
        for it as they were sent) and update the failure streak; returns the back-off it starts (0: none)."""
        # A session's later turns have no intended length: the server's count of the prompt is the cost.
        tokens = sum(
            r.output_tokens + (r.prompt_tokens_intended or r.prompt_tokens_reported or 0) for r in results
        )
        self.spent.append((self.clock(), len(results) - charged[0], tokens - charged[1]))
        # A run with nothing completed, or one the target answered with 429, says "leave me alone".
        saturated = any(r.outcome is Outcome.RATE_LIMITED for r in results)
        if results and (saturated or not any(r.ok for r in results)):
            return self._failed(module)
        self._streaks.clear()
        self.failed_runs = 0
        self.resume_at = 0.0
        return 0.0

    def record_cut(self, module: str = "") -> float:
        """A run of ``module`` cut before it ended (its requests already charged): a failed run."""
        return self._failed(module)

    def _failed(self, module: str) -> float:
        """One more failed run of ``module``; returns the back-off it starts (0: none)."""
        self._streaks[module] = self._streaks.get(module, 0) + 1
        self.failed_runs = max(self._streaks.values())
        if self.failed_runs < self.budget.backoff_after_failures:
            return 0.0
        steps = min(self.failed_runs - self.budget.backoff_after_failures, 64)  # no overflow
        delay = min(FIRST_BACKOFF_S * 2.0**steps, self.budget.max_backoff_s)
        self.resume_at = self.clock() + delay
        return delay
