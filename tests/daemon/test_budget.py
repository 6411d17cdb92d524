"""The probe budget: a sliding hour of spend, and exponential back-off while a target fails."""

from __future__ import annotations

from exporter.daemon.budget import BudgetTracker
from exporter.settings.model import Budget
from exporter.streams.result import Outcome, ProbeResult


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ok(tokens: int = 10) -> ProbeResult:
    return ProbeResult(
        api="chat", token_times=[1.0] * tokens, token_counts=[1] * tokens, prompt_tokens_intended=5
    )


def failed() -> ProbeResult:
    return ProbeResult(api="chat", outcome=Outcome.CONNECT_ERROR)


def test_requests_and_tokens_per_sliding_hour() -> None:
    clock = Clock()
    tracker = BudgetTracker(Budget(max_requests_per_hour=4, max_tokens_per_hour=100), clock)
    assert tracker.skip_reason(2, 30) is None
    tracker.record([ok(), ok()])  # 2 requests, 30 tokens
    assert tracker.skip_reason(2, 30) is None
    assert tracker.skip_reason(3, 0) == "over_requests"
    assert tracker.skip_reason(1, 80) == "over_tokens"
    clock.now += 3601  # the hour slides past the first run
    assert tracker.skip_reason(4, 100) is None


def test_failed_runs_back_off_exponentially_up_to_the_ceiling() -> None:
    clock = Clock()
    tracker = BudgetTracker(Budget(backoff_after_failures=2, max_backoff_s=100), clock)
    tracker.record([failed()])
    assert tracker.skip_reason(1, 0) is None  # one failure is not a streak yet
    tracker.record([failed(), failed()])
    assert tracker.skip_reason(1, 0) == "backing_off"
    clock.now += 30.5
    assert tracker.skip_reason(1, 0) is None
    tracker.record([failed()])  # third failure: 60 s
    clock.now += 59
    assert tracker.skip_reason(1, 0) == "backing_off"
    clock.now += 2
    tracker.record([failed()])  # fourth: 120 s, capped at 100
    clock.now += 100.5
    assert tracker.skip_reason(1, 0) is None


def test_one_success_ends_the_streak() -> None:
    clock = Clock()
    tracker = BudgetTracker(Budget(backoff_after_failures=1), clock)
    tracker.record([failed()])
    assert tracker.skip_reason(1, 0) == "backing_off"
    clock.now += 31
    tracker.record([failed(), ok()])
    assert tracker.skip_reason(1, 0) is None and tracker.failed_runs == 0


def test_a_rate_limited_run_counts_as_a_failure_even_with_successes() -> None:
    clock = Clock()
    tracker = BudgetTracker(Budget(backoff_after_failures=1), clock)
    tracker.record([ok(), ProbeResult(api="chat", outcome=Outcome.RATE_LIMITED, http_status=429)])
    assert tracker.skip_reason(1, 0) == "backing_off"


def test_four_modules_failing_once_each_are_one_failed_run_in_a_row() -> None:
    clock = Clock()
    tracker = BudgetTracker(Budget(backoff_after_failures=2), clock)
    for module in ("a", "b", "c", "d"):  # a target down: every module's first run fails
        assert tracker.record([failed()], module=module) == 0.0
    assert tracker.failed_runs == 1 and tracker.skip_reason(1, 0) is None
    assert tracker.record([failed()], module="a") == 30.0  # a's second failure in a row
    assert tracker.failed_runs == 2 and tracker.skip_reason(1, 0) == "backing_off"


def test_any_modules_good_run_ends_every_streak() -> None:
    tracker = BudgetTracker(Budget(backoff_after_failures=2), Clock())
    tracker.record([failed()], module="a")
    tracker.record([ok()], module="b")
    assert tracker.record([failed()], module="a") == 0.0 and tracker.failed_runs == 1


def test_requests_are_charged_when_sent_and_the_run_settles_its_tokens() -> None:
    tracker = BudgetTracker(Budget(max_requests_per_hour=3, max_tokens_per_hour=100), Clock())
    tracker.charge(2, 80)  # planned: two requests of up to 40 tokens each, sent
    assert tracker.skip_reason(2, 0) == "over_requests" and tracker.skip_reason(1, 21) == "over_tokens"
    tracker.record([ok(), ok()], module="m", charged=(2, 80))  # they cost 15 tokens each
    assert tracker.skip_reason(1, 70) is None and tracker.skip_reason(2, 0) == "over_requests"


def test_a_cut_run_is_a_failed_run() -> None:
    tracker = BudgetTracker(Budget(backoff_after_failures=1), Clock())
    tracker.charge(5, 50)
    assert tracker.record_cut("m") == 30.0 and tracker.skip_reason(1, 0) == "backing_off"
