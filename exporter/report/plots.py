"""Plots of an evaluation (the optional ``plots`` extra, matplotlib): CDFs of TTFT, TBT and fluidity,
deadline-miss rate against the decode deadline (the report's tiers marked), and TTFT against prompt
length; each titled with what it shows and how many requests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from exporter.evaluation import Measured
from exporter.report.files import MISS_CURVE_DEADLINES_S
from exporter.stats.fluidity import deadline_miss_curve

INSTALL_HINT = "plots need matplotlib: pip install 'fluidity-exporter[plots]'"
# Every file ``write_plots`` writes (a forced run removes an earlier run's first: ``bench_report``).
PLOT_FILES = (
    "cdf_ttft.png",
    "cdf_tbt.png",
    "cdf_fluidity.png",
    "deadline_miss_rate.png",
    "ttft_vs_prompt.png",
)


def pyplot() -> Any:
    try:
        import matplotlib as mpl
    except ImportError as exc:
        raise RuntimeError(INSTALL_HINT) from exc
    mpl.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_plots(
    directory: Path, measured: Measured, decode_tiers: Mapping[str, float] | None = None
) -> list[Path]:
    """Write the report's PNG plots into ``directory``; returns their paths. ``decode_tiers``: the
    deadlines the fluidity was evaluated at (marked on the deadline-miss curve)."""
    plt = pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    drawn = figures(plt, measured, decode_tiers or {})
    return [save_figure(plt, figure, directory / name) for name, figure in drawn.items()]


def figures(plt: Any, measured: Measured, decode_tiers: Mapping[str, float]) -> dict[str, Any]:
    """Each plot by its file name (``PLOT_FILES``), drawn and not yet saved."""
    latency = measured.latency
    count = len(measured.results)
    drawn = {
        "cdf_ttft.png": _cdf(plt, {"TTFT": latency.ttft}, "seconds", f"TTFT, {count} requests"),
        "cdf_tbt.png": _cdf(
            plt, {"TBT": latency.tbt * 1e3}, "milliseconds", f"time between tokens, {len(latency.tbt)} gaps"
        ),
        "cdf_fluidity.png": _fluidity_cdf(plt, measured),
        "deadline_miss_rate.png": _miss_curve(plt, measured, decode_tiers),
        "ttft_vs_prompt.png": _ttft_vs_prompt(plt, measured),
    }
    return drawn


def _cdf(plt: Any, series: dict[str, np.ndarray], xlabel: str, title: str) -> Any:
    figure, axes = plt.subplots(figsize=(6, 4))
    for label, values in series.items():
        finite = np.sort(values[np.isfinite(values)])
        if len(finite):
            axes.step(finite, np.arange(1, len(finite) + 1) / len(finite), where="post", label=label)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("fraction of requests" if "TBT" not in series else "fraction of gaps")
    axes.set_ylim(0, 1.02)
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend()
    return figure


def _fluidity_cdf(plt: Any, measured: Measured) -> Any:
    """Fluidity's CDF per tier on [lowest seen, 1]: the index never exceeds 1, and most requests of a
    healthy target sit at exactly 1, which the legend counts (a bare step at the axis' edge said
    nothing; the axis once ran past 1)."""
    series = {}
    for tier, result in measured.tiers.items():
        values = result.fluidity[np.isfinite(result.fluidity)]
        share = float(np.mean(values >= 1.0)) if len(values) else 0.0
        series[f"{tier} ({share:.0%} at 1.0)"] = values
    figure = _cdf(
        plt, series, "fluidity-index", f"fluidity-index per decode tier, {len(measured.results)} requests"
    )
    axes = figure.axes[0]
    lowest = min((float(v.min()) for v in series.values() if len(v)), default=0.0)
    axes.set_xlim(max(0.0, min(lowest - 0.05 * (1.0 - lowest), 0.9)), 1.0)  # at least 0.9 to 1
    if axes.lines:
        axes.legend(loc="upper left")  # clear of the steps, which rise at the right
    for line in axes.lines:  # a step at exactly 1.0 stays visible on the axis' edge
        line.set_clip_on(False)
    return figure


def _miss_curve(plt: Any, measured: Measured, decode_tiers: Mapping[str, float]) -> Any:
    figure, axes = plt.subplots(figsize=(6, 4))
    if measured.batch.token_count:
        curve = deadline_miss_curve(measured.batch, MISS_CURVE_DEADLINES_S)
        axes.plot(curve.decode_deadlines * 1e3, curve.miss_rate)
    for tier, deadline in decode_tiers.items():  # where the report's tiers judge
        axes.axvline(deadline * 1e3, color="grey", linestyle="--", linewidth=0.8)
        axes.annotate(
            f"{tier} {deadline * 1e3:g} ms", (deadline * 1e3, 1.0), xycoords=("data", "axes fraction"),
            rotation=90, va="top", ha="right", fontsize=8, color="grey",
        )  # fmt: skip
    axes.set_xscale("log")
    axes.set_title("decode deadline-miss rate (token-weighted)")
    axes.set_xlabel("decode deadline (ms)")
    axes.set_ylabel("deadline-miss rate")
    axes.grid(alpha=0.3)
    return figure


def _ttft_vs_prompt(plt: Any, measured: Measured) -> Any:
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.scatter(measured.prompt_tokens, measured.latency.ttft, s=8, alpha=0.6, label="measured")
    axes.plot(np.sort(measured.prompt_tokens), np.sort(measured.prefill_deadlines), label="prefill deadline")
    axes.set_title("TTFT against prompt length, with the prefill deadline Dp")
    axes.set_xlabel("prompt tokens")
    axes.set_ylabel("TTFT (s)")
    axes.grid(alpha=0.3)
    axes.legend()
    return figure


def save_figure(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
