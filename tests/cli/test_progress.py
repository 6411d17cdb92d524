"""``bench``'s live line runs on the probe's event loop: with it off (``--quiet``) it must cost the loop
nothing but a count, and with it on it still shows the run's figures."""

from __future__ import annotations

import pytest

from exporter.cli import progress
from exporter.cli.progress import LiveLine
from exporter.evaluation import EvaluationSpec
from exporter.streams.result import Outcome, ProbeResult


def completed() -> ProbeResult:
    result = ProbeResult(api="chat", max_tokens=3)
    result.outcome, result.sent_at = Outcome.OK, 1.0
    result.token_times.extend([1.1, 1.12, 1.14])
    result.token_counts.extend([1, 1, 1])
    return result


def test_a_quiet_live_line_evaluates_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_on_the_loop(*_args: object) -> float:
        raise AssertionError("fluidity evaluated for a live line nobody sees")

    monkeypatch.setattr(progress, "fluidity_index", not_on_the_loop)
    line = LiveLine(2, EvaluationSpec(), enabled=False)
    line(completed())
    line(completed())
    assert line.count == 2 and not line.ttfts and not line.gaps


def test_a_shown_live_line_evaluates_each_result(capsys: pytest.CaptureFixture[str]) -> None:
    line = LiveLine(1, EvaluationSpec(), enabled=True)
    line(completed())
    assert line.count == 1 and line.ttfts == [pytest.approx(0.1)] and len(line.fluidity) == 1
    assert "[1/1] failed 0 | TTFT p50 0.100s" in capsys.readouterr().err
