"""``ProbeAgreement``: the observer's view of each probe request against its client's, joined by id."""

from __future__ import annotations

import numpy as np
import pytest

from exporter.evaluation import EvaluationSpec
from exporter.exposition import traffic_agreement
from exporter.exposition.traffic_agreement import ProbeAgreement, compare, fluid
from exporter.streams.result import Outcome, ProbeResult


def result(times: list[float], probe_id: str | None = None, outcome: Outcome = Outcome.OK) -> ProbeResult:
    stamped = ProbeResult(
        "chat", outcome, sent_at=0.0, token_times=times, token_counts=[1] * len(times), finished_at=times[-1]
    )
    if probe_id is not None:
        stamped.extra["probe_id"] = probe_id
    return stamped


CLIENT = [0.99, 1.0, 1.01, 1.02]  # TTFT just inside the 1 s prefill deadline: no slack
SLOW = [0.99, 1.09, 1.19, 1.29]  # 100 ms gaps: past the medium tier's 50 ms deadlines


def test_gaps_are_compared_pairwise() -> None:
    observed = [0.9901, 1.0002, 1.0100, 1.0204]  # gaps 10.1, 9.8, 10.4 ms against 10, 10, 10
    comparison = compare(result(observed), result(CLIENT), EvaluationSpec())
    assert comparison.gap_differences == pytest.approx([0.0001, 0.0002, 0.0004], abs=1e-9)
    assert not comparison.verdict_differs


def test_different_event_counts_give_no_gaps_to_pair() -> None:
    comparison = compare(result(CLIENT[:3]), result(CLIENT), EvaluationSpec())
    assert len(comparison.gap_differences) == 0


def test_a_verdict_differs_when_one_view_misses_deadlines() -> None:
    assert fluid(result(CLIENT), EvaluationSpec()) and not fluid(result(SLOW), EvaluationSpec())
    assert compare(result(SLOW), result(CLIENT), EvaluationSpec()).verdict_differs
    assert not fluid(result(CLIENT, outcome=Outcome.STREAM_ABORTED), EvaluationSpec())


def test_the_two_sides_join_in_either_order() -> None:
    agreement = ProbeAgreement(EvaluationSpec(), clock=lambda: 0.0)
    agreement.observed("a", result(CLIENT))
    agreement.client_results([result(CLIENT, "a"), result(CLIENT, "b"), result(CLIENT)])  # the last: no id
    agreement.observed("b", result(SLOW))
    counts = agreement.counts()
    assert (counts.compared, counts.verdict_differences) == (2, 1)
    assert counts.gap_differences.count == 6
    assert counts.unmatched == {"observer": 0, "client": 0}


def test_a_side_left_waiting_is_counted_unmatched() -> None:
    now = [0.0]
    agreement = ProbeAgreement(EvaluationSpec(), clock=lambda: now[0])
    agreement.observed("x", result(CLIENT))
    agreement.client_results([result(CLIENT, "y")])
    now[0] = traffic_agreement.JOIN_WAIT_S + 1
    agreement.client_results([result(CLIENT, "x")])  # too late: x was given up, this one waits now
    counts = agreement.counts()
    assert counts.compared == 0 and counts.unmatched == {"observer": 1, "client": 1}


def test_waiting_requests_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traffic_agreement, "MAX_WAITING", 3)
    agreement = ProbeAgreement(EvaluationSpec(), clock=lambda: 0.0)
    for index in range(5):
        agreement.observed(str(index), result(CLIENT))
    assert agreement.counts().unmatched["observer"] == 2
    assert np.isfinite(agreement.counts().gap_differences.sum)
