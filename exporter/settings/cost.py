"""What a target's accelerators cost, read one way from the daemon config and the flags.

``targets[].gpus`` and ``targets[].gpu_hour_price`` (the ``capacity`` command's ``--gpus`` and
``--gpu-hour-price``, put in that shape by ``exporter.cli.capacity``) price a capacity result: fluid tokens
per GPU-second, and the cost of a million of them. A price is per GPU-hour, so it needs ``gpus``: given
alone it would price nothing, without a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from exporter.settings.reader import Section

COST_KEYS: Final = ("gpus", "gpu_hour_price")


@dataclass(frozen=True)
class Cost:
    """Accelerators behind one replica of the target (what one capacity search loads) and the price of
    one of them an hour (any currency); None: not given."""

    gpus: float | None = None
    gpu_hour_price: float | None = None


def read_cost(sec: Section) -> Cost:
    """``gpus`` (> 0) and ``gpu_hour_price`` (>= 0, and only with ``gpus``) of a target-shaped mapping."""
    cost = Cost(
        gpus=sec.opt_number("gpus", None, 0.0, low_open=True),
        gpu_hour_price=sec.opt_number("gpu_hour_price", None, 0.0),
    )
    if sec.get("gpu_hour_price") is not None and sec.get("gpus") is None:
        sec.fail(
            "gpu_hour_price",
            "needs {}: the price is per GPU-hour, so without it nothing is priced",
            ("gpus",),
        )
    return cost
