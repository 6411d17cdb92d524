"""Tests of exporter.engine.snapshot_window: bounded memory by age and count, and the spans figures cover."""

from __future__ import annotations

import pytest

from exporter.engine.catalogue import Signal
from exporter.engine.snapshot import EngineSnapshot
from exporter.engine.snapshot_window import SnapshotWindow


def snap(at: float, prompt: float = 0.0, kind: str = "vllm") -> EngineSnapshot:
    return EngineSnapshot(kind, at, {Signal.PROMPT_TOKENS_TOTAL: prompt})


def test_keeps_one_snapshot_at_or_before_the_age_horizon() -> None:
    window = SnapshotWindow(max_age_s=60.0, max_items=1000)
    for t in range(0, 301, 15):  # a scrape every 15 s for 5 minutes
        window.add(snap(float(t), prompt=10.0 * t))
    kept = [s.at for s in window.snapshots()]
    assert kept == [240.0, 255.0, 270.0, 285.0, 300.0]  # 240 is the base of a full 60 s window


def test_memory_is_bounded_by_count() -> None:
    window = SnapshotWindow(max_age_s=3600.0, max_items=10)
    for t in range(10_000):
        window.add(snap(float(t)))
    assert len(window) == 10
    assert window.latest == snap(9999.0)


def test_figures_over_a_shorter_window_and_while_filling() -> None:
    window = SnapshotWindow(max_age_s=3600.0, max_items=500)
    assert window.figures(300.0) is None
    window.add(snap(0.0, prompt=0.0))
    assert window.figures(300.0) is None
    for t in range(15, 601, 15):
        window.add(snap(float(t), prompt=2.0 * t))  # 2 prompt tokens per second
    five_minutes = window.figures(300.0)
    assert five_minutes is not None
    assert (five_minutes.start, five_minutes.end) == (300.0, 600.0)
    assert five_minutes.rate(Signal.PROMPT_TOKENS_TOTAL) == pytest.approx(2.0)
    hour = window.figures(3600.0)
    assert hour is not None and hour.span_s == 600.0  # only ten minutes of history so far


def test_base_is_the_newest_snapshot_old_enough() -> None:
    window = SnapshotWindow(max_age_s=100.0, max_items=100)
    for t in (0.0, 7.0, 13.0, 40.0):
        window.add(snap(t))
    assert [s.at for s in window.snapshots(30.0)] == [7.0, 13.0, 40.0]
    assert [s.at for s in window.snapshots(5.0)] == [13.0, 40.0]


def test_a_new_engine_kind_starts_afresh() -> None:
    window = SnapshotWindow(max_age_s=100.0, max_items=100)
    window.add(snap(0.0))
    window.add(snap(1.0))
    window.add(snap(2.0, kind="sglang"))
    assert [s.kind for s in window.snapshots()] == ["sglang"]


def test_invalid_use_is_rejected_with_the_value() -> None:
    with pytest.raises(ValueError, match="max_age_s must be > 0, got 0"):
        SnapshotWindow(0, 10)
    with pytest.raises(ValueError, match="max_items must be >= 2"):
        SnapshotWindow(10.0, 1)
    window = SnapshotWindow(10.0, 10)
    window.add(snap(5.0))
    with pytest.raises(ValueError, match="older than the newest"):
        window.add(snap(4.0))
    with pytest.raises(ValueError, match="longer than the window keeps"):
        window.figures(11.0)
    with pytest.raises(ValueError, match="duration_s must be > 0"):
        window.snapshots(0.0)
