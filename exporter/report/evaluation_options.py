"""What a one-shot run's report evaluates, from its options: deadlines (a constant ``Dp`` or a profiled
prefill model), decode tiers, the fluidity target and percentile, SLOs and goodput bounds.

The flags are read as the daemon config's ``slos.<name>`` mapping is, by ``exporter.settings.slo.read_slo``:
``slo_tree`` puts their values in that shape and ``SLO_FLAGS`` names the flag of each config path, so a
bad value fails with the config's message under the flag's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from exporter.evaluation import DeadlinePolicy, EvaluationSpec
from exporter.settings.goodput import goodput_mapping
from exporter.settings.oneshot import Options, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.slo import SLO_KEYS, parse_decode_tiers, read_slo

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
# The prefill mapping's keys and the options that give them.
_PREFILL_OPTIONS: Final = (
    ("deadline", "prefill_deadline"),
    ("model_file", "prefill_model"),
    ("scheduling_slack", "scheduling_slack"),
)


def evaluation_spec(options: Options) -> EvaluationSpec:
    """Deadlines, SLOs and goodput bounds."""
    slo = read_flags(slo_tree(options), SLO_KEYS, read_slo, SLO_FLAGS)
    return EvaluationSpec.of(slo, from_scheduled=bool(options["from_scheduled"]))


def prefill_deadlines(options: Options) -> DeadlinePolicy:
    """``Dp``: ``--prefill-deadline``, or ``--prefill-model`` plus ``--scheduling-slack``."""
    return DeadlinePolicy.of(read_flags(_prefill_tree(options), SLO_KEYS, read_slo, SLO_FLAGS))


def slo_tree(options: Options) -> dict[str, Any]:
    """The SLO options given, as a ``slos.<name>`` mapping of the daemon config."""
    tree = _prefill_tree(options)
    given = {
        "decode_tiers": _text_or_mapping(options["decode_tiers"], "--decode-tiers", parse_decode_tiers),
        "target_fluidity": options["target_fluidity"],
        "percentile": options["percentile"],
        "objectives": options["objective"],
        "goodput": _text_or_mapping(options["goodput"], "--goodput", goodput_mapping),
    }
    return tree | {key: value for key, value in given.items() if value is not None}


def _prefill_tree(options: Options) -> dict[str, Any]:
    prefill = {key: options[option] for key, option in _PREFILL_OPTIONS if options[option] is not None}
    return {"prefill": prefill} if prefill else {}


def _text_or_mapping(value: Any, flag: str, parse: Callable[[str], Mapping[str, Any]]) -> Any:
    """A flag's ``name=value,...`` text as a mapping (a ``--config`` file may give the mapping itself)."""
    if value is None or isinstance(value, Mapping):
        return value
    try:
        return parse(str(value))
    except ValueError as exc:
        raise SettingsError(f"{flag}: {exc}") from exc
