"""A capacity search's result as a person reads it: a table of trials, the answer, the cost figures; and
``capacity.json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from exporter.jobs.capacity import CapacityResult
from exporter.jobs.search_progress import figure, pass_fraction, result_line, verdict_text


def capacity_table(result: CapacityResult) -> str:
    """The trials, the answer and what it costs, one line each."""
    lines = [
        f"{'load':>10} {'verdict':>14} {'headroom':>9} {'pass fraction [95% interval]':>29} {'tokens':>10} "
        f"{'seconds':>8}"
    ]
    for trial in result.trials:
        headroom = f"{trial.headroom:>9.3f}" if math.isfinite(trial.headroom) else f"{'-':>9}"
        lines.append(
            f"{figure(trial.load):>10} {verdict_text(trial):>14} {headroom} {pass_fraction(trial):>29} "
            f"{trial.tokens:>10} {trial.duration_s:>8.1f}"
        )
    lines += [f"trial {t.index} set aside: {t.set_aside}" for t in result.trials if t.set_aside is not None]
    lines.append(f"answer ({result.state or 'none'}): {result_line(result)}")
    if result.prediction is not None:
        lines.append(prediction_line(result.prediction))
    if result.context is not None:
        lines.append(result.context.describe())
    if result.lower_bound is not None:
        rate, good = result.figure("fluid_token_rate"), result.figure("goodput_rate")
        lines.append(
            f"at {figure(result.lower_bound)}: fluid token rate {figure(rate)} tokens/s; goodput {figure(good)} "
            "req/s (requests meeting the SLO per second of offered load)"
        )
    if result.state is not None:  # else no trial was judged: its figures are no finding to price
        measured = result.measured_capacity is not None
        lines += [_cost_line(at, point, measured) for at, point in result.costs().items()]
    trials, aside = len(result.trials), len(result.trials) - len(result.judged)
    set_aside = f" ({aside} set aside)" if aside else ""
    lines.append(
        f"{trials} trial{'' if trials == 1 else 's'}{set_aside}, {result.tokens} tokens, {result.duration_s:.1f} s"
    )
    return "\n".join(lines)


def prediction_line(prediction: dict[str, Any]) -> str:
    """The engine model's prediction beside the measured answer, and each trial that contradicted it."""
    error = prediction.get("error")
    off = f", {error:+.1%} from the lower bound" if isinstance(error, float) else ""
    line = prediction["decode_line"]
    text = (
        f"predicted (engine model, placed the trials, not the answer): {figure(prediction['load'])} "
        f"[{figure(prediction['low'])}, {figure(prediction['high'])}]{off}; decode gap "
        f"{line['fixed_s'] * 1e3:.2f} ms + {line['per_running_s'] * 1e3:.3f} ms x running requests"
    )
    against = prediction.get("contradicted") or []
    if against:
        seen = "; ".join(
            f"trial {c['trial']} at {figure(c['load'])} {c['measured']}ed (predicted {figure(c['predicted'])})"
            for c in against
        )
        text += f"; contradicted, interval widened: {seen}"
    return text


def _cost_line(at: str, point: dict[str, float | None], found: bool) -> str:
    where = "at the highest load tried"
    if at == "capacity":
        where = "at capacity" if found else "at the lower bound"
    text = f"{where} ({figure(point['load'])}): fluid goodput {figure(point['fluid_goodput_tokens_per_s'])} tokens/s"
    if point["fluid_tokens_per_gpu_second"] is not None:
        text += f", {figure(point['fluid_tokens_per_gpu_second'])} fluid tokens per GPU-second"
    if point["cost_per_million_fluid_tokens"] is not None:
        text += f", {figure(point['cost_per_million_fluid_tokens'])} per million fluid tokens"
    return text


def write_capacity_json(directory: Path, result: CapacityResult) -> Path:
    """``directory/capacity.json``: the result as the jobs API shows it (less the target, module and
    workers the daemon's job adds)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "capacity.json"
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path
