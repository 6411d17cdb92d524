"""What a one-shot run's report evaluates, from its flags: deadlines (a constant ``Dp`` or a profiled
prefill model), decode tiers, the fluidity target and percentile, SLOs and goodput bounds.

The flags are read as the daemon config's ``slos.<name>`` mapping is, by ``exporter.settings.slo.read_slo``:
``slo_tree`` puts their values in that shape and ``SLO_FLAGS`` names the flag of each config path, so a
bad value fails with the config's message under the flag's name. What the report evaluates is built
from these values by ``exporter.report.evaluation_options``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.settings.goodput import goodput_mapping
from exporter.settings.oneshot import RawFlags, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.slo import SLO_KEYS, Slo, parse_decode_tiers, read_slo

# The flag that gives each part of an SLO (a config path, as read_slo reports problems under it).
SLO_FLAGS: Final = {
    "prefill": "--prefill-deadline/--prefill-model",
    "prefill.deadline": "--prefill-deadline",
    "prefill.model_file": "--prefill-model",
    "prefill.scheduling_slack": "--scheduling-slack",
    "decode_tiers": "--decode-tiers",
    "target_fluidity": "--target-fluidity",
    "percentile": "--percentile",
    "objectives": "--objective",
    "goodput": "--goodput",
}
# The prefill mapping's keys and the flags that give them.
_PREFILL_FLAGS: Final = (
    ("deadline", "prefill_deadline"),
    ("model_file", "prefill_model"),
    ("scheduling_slack", "scheduling_slack"),
)


@dataclass(frozen=True)
class EvaluationFlags:
    """The evaluation flags read: the SLO a run is judged by, and whether latency counts from the
    scheduled send (``--from-scheduled``)."""

    slo: Slo = field(default_factory=Slo)
    from_scheduled: bool = False


def read_evaluation_flags(raw: RawFlags) -> EvaluationFlags:
    """Deadlines, SLOs and goodput bounds."""
    slo = read_flags(slo_tree(raw), SLO_KEYS, read_slo, SLO_FLAGS)
    return EvaluationFlags(slo, bool(raw.get("from_scheduled")))


def read_prefill_flags(raw: RawFlags) -> Slo:
    """``Dp`` alone, as an SLO of defaults otherwise: ``--prefill-deadline``, or ``--prefill-model``
    plus ``--scheduling-slack``."""
    return read_flags(_prefill_tree(raw), SLO_KEYS, read_slo, SLO_FLAGS)


def slo_tree(raw: RawFlags) -> dict[str, Any]:
    """The SLO flags given, as a ``slos.<name>`` mapping of the daemon config."""
    tree = _prefill_tree(raw)
    values = {
        "decode_tiers": _text_or_mapping(raw.get("decode_tiers"), "--decode-tiers", parse_decode_tiers),
        "target_fluidity": raw.get("target_fluidity"),
        "percentile": raw.get("percentile"),
        "objectives": raw.get("objective"),
        "goodput": _text_or_mapping(raw.get("goodput"), "--goodput", goodput_mapping),
    }
    return tree | {key: value for key, value in values.items() if value is not None}


def _prefill_tree(raw: RawFlags) -> dict[str, Any]:
    prefill = {key: raw.get(flag) for key, flag in _PREFILL_FLAGS if raw.get(flag) is not None}
    return {"prefill": prefill} if prefill else {}


def _text_or_mapping(value: Any, flag: str, parse: Callable[[str], Mapping[str, Any]]) -> Any:
    """A flag's ``name=value,...`` text as a mapping (a ``--config`` file may give the mapping itself)."""
    if value is None or isinstance(value, Mapping):
        return value
    try:
        return parse(str(value))
    except ValueError as exc:
        raise SettingsError(f"{flag}: {exc}") from exc
