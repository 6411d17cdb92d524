"""capacity.png draws what the table says: each trial by its verdict, the answer and the bracket, and
headroom ticks a person can read."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from exporter.report.capacity_plot import (
    HeadroomPoint,
    PlotAnswer,
    answer_label,
    headroom_figure,
    plot_groups,
    write_headroom_plot,
)

POINTS = [
    HeadroomPoint(1, 1.0, 6.3, "pass"),
    HeadroomPoint(2, 4.0, 3.8, "pass"),
    HeadroomPoint(3, 11.27, 0.9, "fail"),
    HeadroomPoint(4, 10.2, 1.02, "inconclusive"),
    HeadroomPoint(5, 10.7, math.nan, "no data"),
]


def test_an_inconclusive_trial_is_drawn_as_inconclusive_not_as_pass_or_fail() -> None:
    """Drawn by ``passed`` once, a trial the table called inconclusive showed as a pass or a fail."""
    groups = plot_groups(POINTS)
    assert {verdict: [p.trial for p in group] for verdict, group in groups.items()} == {
        "pass": [1, 2], "fail": [3], "inconclusive": [4],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "label"),
    [
        (PlotAnswer("found", 10.2, 10.7), "capacity 10.2 req/s"),
        (PlotAnswer("lower_bound", 21.75, None), "capacity at least 21.75 req/s"),
        (PlotAnswer("inconclusive", 10.2, 10.7), "inconclusive: passes at 10.2 req/s"),
        (PlotAnswer("interrupted", 4.0, None), "interrupted: passed at 4 req/s"),
        (PlotAnswer("not_met", None, 0.25), None),
    ],
)
def test_the_answer_is_marked_as_the_table_says_it(answer: PlotAnswer, label: str | None) -> None:
    assert answer_label(answer, "req/s") == label


def test_the_figure_marks_the_answer_and_the_bracket_with_plain_headroom_ticks(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plt, figure, axes = headroom_figure(POINTS, PlotAnswer("inconclusive", 10.2, 11.27), "rate")
    try:
        figure.canvas.draw()
        legend = [text.get_text() for text in axes.get_legend().get_texts()]
        ticks = [label.get_text() for label in axes.get_yticklabels() if label.get_text()]
    finally:
        plt.close(figure)
    assert "bracket [10.2, 11.27) req/s" in legend and "inconclusive: passes at 10.2 req/s" in legend
    assert any(text.startswith("inconclusive") for text in legend[:3])
    # Within one decade the log axis once had one label, rendered as 10^0.
    assert {"1", "2", "5"} <= set(ticks) and not any("10^" in t or "mathdefault" in t for t in ticks)
    assert (
        write_headroom_plot(tmp_path / "c.png", POINTS, PlotAnswer("found", 10.2, 11.27), "rate")
        .stat()
        .st_size
    )
