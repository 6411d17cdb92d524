"""What a one-shot run's report evaluates, from its options: deadlines (a constant ``Dp`` or a profiled
prefill model), decode tiers, the fluidity target and percentile, SLOs and goodput bounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from exporter.evaluation import DeadlinePolicy, EvaluationSpec
from exporter.options.goodput import parse_goodput
from exporter.options.oneshot import OptionError, Options
from exporter.stats.prefill import PrefillModel, parse_json
from exporter.stats.slo import DECODE_TIERS, GoodputBounds, parse_slo


def evaluation_spec(options: Options) -> EvaluationSpec:
    """Deadlines, SLOs and goodput bounds."""
    deadlines = dataclasses.replace(
        prefill_deadlines(options),
        decode_tiers=_tiers(options["decode_tiers"]),
        target_fluidity=options["target_fluidity"] or DeadlinePolicy.target_fluidity,
        percentile=options["percentile"] or DeadlinePolicy.percentile,
    )
    try:
        slos = tuple(parse_slo(text) for text in options["objective"] or ())
    except ValueError as exc:
        raise OptionError(f"--objective: {exc}") from exc
    return EvaluationSpec(deadlines, slos, _goodput(options["goodput"]), bool(options["from_scheduled"]))


def prefill_deadlines(options: Options) -> DeadlinePolicy:
    """``Dp``: ``--prefill-deadline``, or ``--prefill-model`` plus ``--scheduling-slack``."""
    return DeadlinePolicy(
        prefill_deadline=options["prefill_deadline"] or DeadlinePolicy.prefill_deadline,
        prefill_model=prefill_model_file(options["prefill_model"]),
        scheduling_slack=options["scheduling_slack"] or 0.0,
    )


def prefill_model_file(path: str | None) -> PrefillModel | None:
    """The prefill model a ``profile`` run wrote to ``path``."""
    if not path:
        return None
    try:
        return parse_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OptionError(f"--prefill-model {path}: {exc}") from exc


def _tiers(text: str | Mapping[str, float] | None) -> dict[str, float]:
    if text is None:
        return dict(DECODE_TIERS)
    pairs = (
        text.items() if isinstance(text, Mapping) else (item.partition("=")[::2] for item in text.split(","))
    )
    tiers: dict[str, float] = {}
    for name, value in pairs:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise OptionError(f'--decode-tiers: "{name}={value}" needs seconds, e.g. medium=0.05') from None
        if not seconds > 0:
            raise OptionError(f"--decode-tiers: {name} must be > 0 seconds, got {value}")
        tiers[str(name).strip()] = seconds
    return tiers


def _goodput(text: str | None) -> GoodputBounds | None:
    if not text:
        return None
    try:
        return parse_goodput(text)
    except ValueError as exc:
        raise OptionError(f"--goodput: {exc}") from exc
