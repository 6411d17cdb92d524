"""The capacity search's plot: deadline headroom against load, each trial drawn as the table judges it
(pass, fail, inconclusive), with the answer and the bracket marked.

It takes plain points, not a search result, so the report layer needs nothing of ``exporter.jobs``
(the ``capacity`` command makes them from the trials). What is drawn is a pure function of them
(``plot_groups``, ``answer_label``); only ``headroom_figure`` touches matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from exporter.report.plots import pyplot, save_figure

# How each verdict of the table is drawn: (marker, colour, legend label). "no data" trials have no
# headroom and are left out.
VERDICT_STYLE = {
    "pass": ("o", "tab:green", "pass"),
    "fail": ("x", "tab:red", "fail"),
    "inconclusive": ("D", "tab:orange", "inconclusive (interval straddles the objective)"),
}


class HeadroomPoint(NamedTuple):
    """One trial: its number, load, deadline headroom (>= 1 meets the SLO) and verdict as the table
    says it: "pass", "fail" or "inconclusive" (its pass fraction's interval straddles the objective)."""

    trial: int
    load: float
    headroom: float
    verdict: str


class PlotAnswer(NamedTuple):
    """What the search found: its state ("found", "lower_bound", ...) and the bracket's ends."""

    state: str | None
    lower_bound: float | None
    upper_bound: float | None


def plot_groups(points: Sequence[HeadroomPoint]) -> dict[str, list[HeadroomPoint]]:
    """The trials with a headroom, by verdict (``VERDICT_STYLE``'s order; an unknown one fails)."""
    shown = [p for p in points if math.isfinite(p.headroom) and p.headroom > 0]
    groups: dict[str, list[HeadroomPoint]] = {verdict: [] for verdict in VERDICT_STYLE}
    for point in shown:
        groups[point.verdict if point.verdict in groups else "fail"].append(point)
    return {verdict: group for verdict, group in groups.items() if group}


def answer_label(answer: PlotAnswer, unit: str) -> str | None:
    """The answer's line as the table says it: a capacity only when found, else what it is."""
    low = answer.lower_bound
    if low is None:
        return None
    said = {
        "found": "capacity",
        "lower_bound": "capacity at least",
        "inconclusive": "inconclusive: passes at",
        "interrupted": "interrupted: passed at",
    }.get(answer.state or "", "passed at")
    return f"{said} {low:.4g} {unit}"


def headroom_figure(
    points: Sequence[HeadroomPoint], answer: PlotAnswer, load_kind: str
) -> tuple[Any, Any, Any]:
    """(pyplot, figure, axes) of headroom against load: the trials by verdict, headroom 1, the
    answer and the bracket ``[lower_bound, upper_bound)`` shaded."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    unit = "req/s" if load_kind == "rate" else "concurrent"
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for verdict, group in plot_groups(points).items():
        marker, colour, label = VERDICT_STYLE[verdict]
        axes.scatter(
            [p.load for p in group], [p.headroom for p in group], marker=marker, color=colour, label=label
        )
        for point in group:
            axes.annotate(str(point.trial), (point.load, point.headroom), fontsize=8, xytext=(4, 4),
                          textcoords="offset points")  # fmt: skip
    axes.axhline(1.0, color="grey", linestyle=":", label="SLO boundary (headroom 1)")
    if answer.lower_bound is not None and answer.upper_bound is not None:
        axes.axvspan(answer.lower_bound, answer.upper_bound, color="tab:blue", alpha=0.12,
                     label=f"bracket [{answer.lower_bound:.4g}, {answer.upper_bound:.4g}) {unit}")  # fmt: skip
    said = answer_label(answer, unit)
    if said is not None:
        style = "-" if answer.state == "found" else "--"
        axes.axvline(answer.lower_bound, color="tab:blue", linestyle=style, label=said)
    axes.set_yscale("log")
    # Ticks at 1, 2 and 5 of each decade, as plain numbers (0.5, 1, 2): the headroom is read as a
    # factor, and a span within one decade had a single label, "10^0".
    axes.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("requests/s" if load_kind == "rate" else "concurrency")
    axes.set_ylabel("deadline headroom (>= 1 meets the SLO)")
    axes.legend(fontsize=8, loc="best")
    return plt, figure, axes


def write_headroom_plot(
    path: Path, points: Sequence[HeadroomPoint], answer: PlotAnswer, load_kind: str
) -> Path:
    """``headroom_figure`` written as a PNG to ``path``."""
    plt, figure, _ = headroom_figure(points, answer, load_kind)
    return save_figure(plt, figure, path)
