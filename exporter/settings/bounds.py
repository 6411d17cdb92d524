"""The upper bound of every number a config may hold, in one place (docs/configuration.md "Bounds" lists them).

Each bound keeps a value inside what the run-time parts can do: APScheduler keeps intervals as a
``timedelta`` (which overflows near 2.7 million years, and a job due in a century never runs anyway),
asyncio timers take seconds as floats, a prompt is built in memory before it is sent, and a probe run's
requests are all planned up front. A value above its bound is refused by ``check-config`` with its path,
so whatever ``check-config`` accepts, ``run`` starts and serves.
"""

from __future__ import annotations

from exporter.settings.lengths import MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS
from exporter.settings.reader import MAX_DURATION_S
from exporter.settings.target import MAX_TIMEOUT_S  # targets[].timeouts.*: a day

DAY_S = 86400.0
# MAX_DURATION_S (366d): any duration without a tighter bound (SLO deadlines, goodput bounds)
MAX_INTERVAL_S = 7 * DAY_S  # modules.*.schedule.interval and jitter: rarer probes are a cron line
MAX_SCRAPE_INTERVAL_S = 3600.0  # engine_metrics.interval, gateway_metrics.interval
MAX_BACKOFF_S = DAY_S  # targets[].budget.max_backoff
MAX_WINDOW_S = 31 * DAY_S  # global.windows: results are kept in memory for the longest one
MAX_JOB_DURATION_S = 7 * DAY_S  # jobs.limits.max_duration

MAX_REQUESTS_PER_RUN = 10_000  # modules.*.requests_per_run: every request of a run is planned at once
MAX_CONCURRENCY = 1_000  # modules.*.concurrency
MAX_RESULTS_PER_WINDOW = 1_000_000  # global.max_results_per_window: the memory bound itself
MAX_BACKOFF_AFTER_FAILURES = 1_000  # targets[].budget.backoff_after_failures
MAX_REQUESTS_PER_HOUR = 10_000_000  # targets[].budget.max_requests_per_hour (about 2,800 req/s)
MAX_TOKENS_PER_HOUR = 10_000_000_000_000  # targets[].budget.max_tokens_per_hour
MAX_JOB_HISTORY = 100_000  # jobs.history
MAX_JOB_RATE = 10_000.0  # jobs.limits.max_rate (requests/s)
MAX_JOB_CONCURRENCY = 10_000  # jobs.limits.max_concurrency
MAX_JOB_TOKENS = 10_000_000_000  # jobs.limits.max_tokens
MAX_JOB_TRIALS = 100  # jobs.limits.max_trials
MAX_JOB_REQUESTS_PER_TRIAL = 1_000_000  # jobs.limits.max_requests_per_trial

__all__ = [
    "DAY_S",
    "MAX_BACKOFF_AFTER_FAILURES",
    "MAX_BACKOFF_S",
    "MAX_CONCURRENCY",
    "MAX_DURATION_S",
    "MAX_INTERVAL_S",
    "MAX_JOB_CONCURRENCY",
    "MAX_JOB_DURATION_S",
    "MAX_JOB_HISTORY",
    "MAX_JOB_RATE",
    "MAX_JOB_REQUESTS_PER_TRIAL",
    "MAX_JOB_TOKENS",
    "MAX_JOB_TRIALS",
    "MAX_OUTPUT_TOKENS",
    "MAX_PROMPT_TOKENS",
    "MAX_REQUESTS_PER_HOUR",
    "MAX_REQUESTS_PER_RUN",
    "MAX_RESULTS_PER_WINDOW",
    "MAX_SCRAPE_INTERVAL_S",
    "MAX_TIMEOUT_S",
    "MAX_TOKENS_PER_HOUR",
    "MAX_WINDOW_S",
]
