"""Helpers the options tests share (kept out of the test modules, so that no test module imports another)."""

from __future__ import annotations

from typing import Any

# Every flag read_evaluation_flags reads; a one-shot run's options hold None for those not given.
FLAG_KEYS = (
    "prefill_deadline", "prefill_model", "scheduling_slack", "decode_tiers", "target_fluidity",
    "percentile", "objective", "goodput", "from_scheduled",
)  # fmt: skip


def flag_options(**given: Any) -> dict[str, Any]:
    """A one-shot run's options with only ``given`` set."""
    return dict.fromkeys(FLAG_KEYS) | given
