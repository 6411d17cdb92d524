"""Health checks of the load, as pure functions of recorded results (table-driven)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from exporter.load.health import (
    HealthThresholds,
    check_concurrency,
    check_doubtful_gaps,
    check_lateness,
    check_output_tokens,
    check_prompt_tokens,
    check_send_rate,
    check_success,
    check_unreliable,
    lateness,
    load_health,
    mean_in_flight,
)
from exporter.streams.result import Outcome, ProbeResult

LIMITS = HealthThresholds()


def _result(i: int = 0, **kw: object) -> ProbeResult:
    base: dict[str, object] = {"api": "chat", "scheduled_at": float(i), "sent_at": float(i) + 0.001,
                               "finished_at": float(i) + 0.5, "max_tokens": 4, "token_counts": [1] * 4,
                               "token_times": [float(i) + 0.1 * k for k in range(1, 5)]}  # fmt: skip
    base.update(kw)
    return ProbeResult(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reported", "exact", "observed", "passed"),
    [
        ([100, 200, 400], True, 0.0, True),
        ([100, 202, 400], True, 0.0, True),  # the median forgives one odd request
        ([101, 202, 404], True, 0.01, False),  # exact prompts must match exactly
        ([110, 220, 440], False, 0.1, True),
        ([150, 300, 600], False, 0.5, False),
    ],
)
def test_prompt_tokens(reported: list[int], exact: bool, observed: float, passed: bool) -> None:
    results = [
        _result(i, prompt_tokens_intended=want, prompt_tokens_reported=got)
        for i, (want, got) in enumerate(zip([100, 200, 400], reported, strict=True))
    ]
    check = check_prompt_tokens(results, exact, LIMITS)
    assert check.observed == pytest.approx(observed)
    assert check.passed is passed


def test_unjudged_checks_say_why() -> None:
    check = check_prompt_tokens([_result()], exact=False, limits=LIMITS)
    assert check.passed is None
    assert check.message == "not judged: the server reported no prompt tokens (approximate)"
    # Every request failed: the server never had a chance to report any (it said it reported none).
    failed = _result(outcome=Outcome.HTTP_STATUS)
    message = check_prompt_tokens([failed], exact=False, limits=LIMITS).message
    assert message == "not judged: no request completed (approximate)"
    assert check_send_rate([_result()], 5.0, LIMITS).passed is None
    assert (
        check_lateness([ProbeResult(api="chat")], LIMITS).message
        == "no request has both scheduled and sent times"
    )
    assert check_success([], LIMITS).passed is None
    assert lateness([]).p50 is None


def test_send_rate_compares_with_the_planned_schedule() -> None:
    on_time = [_result(i) for i in range(11)]
    check = check_send_rate(on_time, 1.2, LIMITS)
    assert check.passed is True and check.observed == pytest.approx(1.0)
    assert check.message.endswith("nominal target 1.2 req/s")
    # Sends that drift later and later: the last leaves 5 s late.
    late = [_result(i, sent_at=i * 1.5) for i in range(11)]
    check = check_send_rate(late, None, LIMITS)
    assert check.passed is False and check.observed == pytest.approx(10 / 15)
    assert "66.7% of the planned 1 req/s: the sender fell behind" in check.message


def test_lateness_percentiles() -> None:
    results = [_result(i, sent_at=i + 0.001 * (i % 10)) for i in range(100)]
    late = lateness(results)
    assert late.count == 100
    assert late.max == pytest.approx(0.009)
    assert late.p50 == pytest.approx(0.0045)
    check = check_lateness(results, HealthThresholds(max_lateness_p99_s=0.005))
    assert check.passed is False and "p99 limit 5 ms" in check.message


def test_output_tokens_counts_reported_then_received() -> None:
    full = _result(completion_tokens_reported=4)
    short = _result(token_counts=[1, 1], token_times=[0.1, 0.2])
    failed = _result(outcome=Outcome.HTTP_STATUS, token_counts=[], token_times=[])
    check = check_output_tokens([full, short, failed], LIMITS)
    assert check.observed == pytest.approx(0.5)  # the failed one is not counted
    assert check.passed is False


@pytest.mark.parametrize(
    ("flagged", "doubtful", "observed", "passed"),
    [
        (0, 0, 0.0, True),
        (10, 2, 0.0005, True),  # a stall: two chunks of each of 10 streams read as one, 2 gaps each
        (20, 2, 0.001, True),  # at the limit
        (20, 3, 0.0015, False),
        (1, 40, 0.001, True),  # one request whose every stamp was the loop's, late
        (1, 41, 0.001025, False),
    ],
)
def test_doubtful_gaps_count_the_gaps_the_flags_concern(
    flagged: int, doubtful: int, observed: float, passed: bool
) -> None:
    # 1000 requests of 40 token events: 40,000 gaps; ``doubtful`` of them in each flagged request.
    results = [
        _result(i, token_counts=[1] * 40, token_times=[i + k / 100 for k in range(40)]) for i in range(1000)
    ]
    for result in results[:flagged]:
        result.unreliable, result.doubtful_gaps = True, doubtful
    check = check_doubtful_gaps(results, LIMITS)
    assert check.observed == pytest.approx(observed) and check.passed is passed
    assert check.message == (
        f"{flagged * doubtful} of 40000 gaps between tokens ({observed:.3%}) may be wrong, in the requests "
        "the client flagged (limit 0.1%)"
    )


def test_no_gap_timed_leaves_none_in_doubt() -> None:
    failed = _result(outcome=Outcome.HTTP_STATUS, token_counts=[], token_times=[])
    check = check_doubtful_gaps([failed], LIMITS)
    assert check.passed is True and check.message == "no gap between tokens was timed"


def test_unreliable_and_success_shares() -> None:
    results = [_result(i) for i in range(98)] + [
        _result(98, unreliable=True),
        _result(99, outcome=Outcome.RATE_LIMITED),
    ]
    assert check_unreliable(results, LIMITS).passed is True  # 1% is at the limit
    success = check_success(results, LIMITS)
    assert success.passed is True and success.observed == pytest.approx(0.99)
    assert success.message == "99.0% of 100 requests completed (rate_limited 1; needs >= 95%)"


def test_mean_in_flight_over_the_steady_part() -> None:
    # Two overlapping requests throughout [0, 10]; the drain after the last send does not count.
    results = [_result(sent_at=0.0, finished_at=10.0), _result(sent_at=0.0, finished_at=5.0),
               _result(sent_at=5.0, finished_at=30.0)]  # fmt: skip
    assert mean_in_flight(results) == pytest.approx(2.0)
    assert check_concurrency(results, 2, LIMITS).passed is True
    assert check_concurrency(results, 3, LIMITS).passed is False


def test_load_health_picks_checks_by_mode_and_serialises() -> None:
    results = [_result(i) for i in range(5)]
    open_names = [c.name for c in load_health(results, target_rate=1.0)]
    closed_names = [c.name for c in load_health(results, concurrency=2)]
    assert open_names[0] == "send_rate" and closed_names[0] == "concurrency"
    assert open_names[1:] == closed_names[1:]
    for check in load_health(results, target_rate=1.0):
        json.dumps(dataclasses.asdict(check))  # plain Python values: summary.json can hold them
        assert check.passed is None or type(check.passed) is bool
