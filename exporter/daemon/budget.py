"""How much probe traffic a target may still get, and whether to back off while it fails.

Scheduled probes load a production endpoint, so each target has an hourly budget of requests and
tokens (a sliding hour of what was actually sent), and consecutive failed runs (no request completed, or
the target answered 429: it is saturated) make the prober back off exponentially, up to a ceiling, instead of hammering a target that is down.
A decision is a reason to skip (``over_requests``, ``over_tokens``, ``backing_off``) or None: go.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from exporter.config.model import Budget
from exporter.probe.result import Outcome, ProbeResult

HOUR_S = 3600.0
FIRST_BACKOFF_S = 30.0


class BudgetTracker:
    """One target's spend over the last hour and its failure streak; ``clock`` is monotonic seconds."""

    def __init__(self, budget: Budget, clock: Callable[[], float]) -> None:
        self.budget = budget
        self.clock = clock
        self.spent: deque[tuple[float, int, int]] = deque()  # (when, requests, tokens)
        self.failed_runs = 0
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

    def record(self, results: Sequence[ProbeResult]) -> float:
        """Charge a finished run and update the failure streak; returns the back-off it starts (0: none)."""
        now = self.clock()
        # A session's later turns have no intended length: the server's count of the prompt is the cost.
        tokens = sum(
            r.output_tokens + (r.prompt_tokens_intended or r.prompt_tokens_reported or 0) for r in results
        )
        self.spent.append((now, len(results), tokens))
        # A run with nothing completed, or one the target answered with 429, says "leave me alone".
        saturated = any(r.outcome is Outcome.RATE_LIMITED for r in results)
        if results and (saturated or not any(r.ok for r in results)):
            self.failed_runs += 1
            if self.failed_runs >= self.budget.backoff_after_failures:
                steps = min(self.failed_runs - self.budget.backoff_after_failures, 64)  # no overflow
                delay = min(FIRST_BACKOFF_S * 2.0**steps, self.budget.max_backoff_s)
                self.resume_at = now + delay
                return delay
        else:
            self.failed_runs = 0
            self.resume_at = 0.0
        return 0.0
