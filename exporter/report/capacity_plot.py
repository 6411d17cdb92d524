"""The capacity search's plot: deadline headroom against load, passes and failures, the capacity marked.

It takes plain points, not a search result, so the report layer needs nothing of ``exporter.jobs``
(the ``capacity`` command makes them from the trials).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from exporter.report.plots import pyplot, save_figure


class HeadroomPoint(NamedTuple):
    """One trial: its number, load, deadline headroom (>= 1 meets the SLO) and verdict."""

    trial: int
    load: float
    headroom: float
    passed: bool


def write_headroom_plot(
    path: Path, points: Sequence[HeadroomPoint], capacity: float | None, load_kind: str
) -> Path:
    """Headroom against load: passes and failures, headroom 1 and the capacity marked."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    shown = [p for p in points if math.isfinite(p.headroom)]
    for passed, marker, label in ((True, "o", "pass"), (False, "x", "fail")):
        group = [p for p in shown if p.passed is passed]
        axes.scatter([p.load for p in group], [p.headroom for p in group], marker=marker, label=label)
    for point in shown:
        axes.annotate(str(point.trial), (point.load, point.headroom), fontsize=7)
    axes.axhline(1.0, color="grey", linestyle=":", label="SLO boundary")
    if capacity is not None:
        axes.axvline(capacity, color="green", linestyle="--", label=f"capacity {capacity:.3g}")
    axes.set_yscale("log")
    axes.set_xlabel("requests/s" if load_kind == "rate" else "concurrency")
    axes.set_ylabel("deadline headroom (>= 1 meets the SLO)")
    axes.legend()
    return save_figure(plt, figure, path)
