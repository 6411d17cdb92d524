"""What a job record's stored result must hold to be read back, checked when a record is loaded.

A succeeded capacity search's result is what ``/metrics`` reads on every scrape (the latest search per
(target, module), ``daemon.job_snapshots.capacity_snapshot``); a record that passed a shallow check
with a result lacking ``load_kind`` made every scrape answer 500, for good. So the fields that reader
uses are checked here, as ``CapacityResult.to_dict`` writes them; the others are shown by the jobs API
as they are. Errors name the field by its path (``result.trials[2].load``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOAD_KINDS = ("rate", "concurrency")
_NUMBERS = (
    "capacity",
    "lower_bound",
    "upper_bound",
    "fluid_token_rate_at_capacity",
    "goodput_ratio_at_capacity",
    "goodput_rate_at_capacity",
)
_STRINGS = ("state", "module", "stopped_by")
_COST_NUMBERS = ("fluid_goodput_tokens_per_s", "fluid_tokens_per_gpu_second", "cost_per_million_fluid_tokens")


def check_result(kind: str, state: str, result: Mapping[str, Any] | None) -> None:
    """``ValueError`` naming the field when a ``kind`` job that ended ``state`` has a result the
    daemon could not read back (only a succeeded capacity search's result is read)."""
    if kind == "capacity" and state == "succeeded":
        if result is None:
            raise ValueError("result: a succeeded capacity search has one")
        check_capacity_result(result)


def check_capacity_result(result: Mapping[str, Any]) -> None:
    """The fields of a capacity search's result that its gauges are built from."""
    if result.get("load_kind") not in LOAD_KINDS:
        raise ValueError(
            f"result.load_kind: {result.get('load_kind')!r} is not one of {', '.join(LOAD_KINDS)}"
        )
    for key in _NUMBERS:
        _number(f"result.{key}", result.get(key), optional=True)
    for key in _STRINGS:
        if result.get(key) is not None and not isinstance(result[key], str):
            raise ValueError(f"result.{key}: expected a string, got {result[key]!r}")
    trials = result.get("trials", [])
    if not isinstance(trials, list):
        raise ValueError(f"result.trials: expected a list, got {trials!r}")
    for index, trial in enumerate(trials):
        _trial(f"result.trials[{index}]", trial)
    costs = result.get("costs") or {}
    if not isinstance(costs, Mapping):
        raise ValueError(f"result.costs: expected a mapping, got {costs!r}")
    for at, point in costs.items():
        if not isinstance(point, Mapping):
            raise ValueError(f"result.costs.{at}: expected a mapping, got {point!r}")
        for key in _COST_NUMBERS:
            _number(f"result.costs.{at}.{key}", point.get(key), optional=True)


def _trial(path: str, trial: Any) -> None:
    if not isinstance(trial, Mapping):
        raise ValueError(f"{path}: expected a mapping, got {trial!r}")
    if isinstance(trial.get("index"), bool) or not isinstance(trial.get("index"), int):
        raise ValueError(f"{path}.index: expected an integer, got {trial.get('index')!r}")
    _number(f"{path}.load", trial.get("load"), optional=False)
    if not isinstance(trial.get("passed"), bool):
        raise ValueError(f"{path}.passed: expected true or false, got {trial.get('passed')!r}")
    _number(f"{path}.headroom", trial.get("headroom"), optional=True)


def _number(path: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{path}: expected a number, got {value!r}")
