"""Plots of an evaluation (the optional ``plots`` extra, matplotlib): CDFs of TTFT, TBT and fluidity,
deadline-miss rate against the decode deadline, and TTFT against prompt length."""

from __future__ import annotations

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


def write_plots(directory: Path, measured: Measured) -> list[Path]:
    """Write the report's PNG plots into ``directory``; returns their paths."""
    plt = pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    latency = measured.latency
    paths = [
        _cdf(plt, directory / "cdf_ttft.png", {"TTFT": latency.ttft}, "seconds"),
        _cdf(plt, directory / "cdf_tbt.png", {"TBT": latency.tbt * 1e3}, "milliseconds"),
        _cdf(
            plt,
            directory / "cdf_fluidity.png",
            {f"{tier}": result.fluidity for tier, result in measured.tiers.items()},
            "fluidity-index",
        ),
        _miss_curve(plt, directory / "deadline_miss_rate.png", measured),
        _ttft_vs_prompt(plt, directory / "ttft_vs_prompt.png", measured),
    ]
    return paths


def _cdf(plt: Any, path: Path, series: dict[str, np.ndarray], xlabel: str) -> Path:
    figure, axes = plt.subplots(figsize=(6, 4))
    for label, values in series.items():
        finite = np.sort(values[np.isfinite(values)])
        if len(finite):
            axes.step(finite, np.arange(1, len(finite) + 1) / len(finite), where="post", label=label)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("fraction of requests" if "TBT" not in series else "fraction of gaps")
    axes.grid(alpha=0.3)
    axes.legend()
    return save_figure(plt, figure, path)


def _miss_curve(plt: Any, path: Path, measured: Measured) -> Path:
    figure, axes = plt.subplots(figsize=(6, 4))
    if measured.batch.token_count:
        curve = deadline_miss_curve(measured.batch, MISS_CURVE_DEADLINES_S)
        axes.plot(curve.decode_deadlines * 1e3, curve.miss_rate)
    axes.set_xscale("log")
    axes.set_xlabel("decode deadline (ms)")
    axes.set_ylabel("deadline-miss rate")
    axes.grid(alpha=0.3)
    return save_figure(plt, figure, path)


def _ttft_vs_prompt(plt: Any, path: Path, measured: Measured) -> Path:
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.scatter(measured.prompt_tokens, measured.latency.ttft, s=8, alpha=0.6, label="measured")
    axes.plot(np.sort(measured.prompt_tokens), np.sort(measured.prefill_deadlines), label="prefill deadline")
    axes.set_xlabel("prompt tokens")
    axes.set_ylabel("TTFT (s)")
    axes.grid(alpha=0.3)
    axes.legend()
    return save_figure(plt, figure, path)


def save_figure(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
