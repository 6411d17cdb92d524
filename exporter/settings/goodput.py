"""Goodput bounds, read one way wherever they are given.

The daemon config (``slos.*.goodput``), a job's parameters (``slo.goodput``, JSON) and the ``--goodput``
flag all end in ``read_goodput`` (the flag's text made a mapping by ``goodput_mapping``): latencies take seconds or a duration (``2s``, ``250ms``),
``min_fluidity`` a number in [0, 1]. The flag's text form, ``ttft<=2,min_fluidity>=0.9``, names each
bound with its comparison, and only the one each bound has is accepted (``<=`` for a latency, ``>=`` for
``min_fluidity``): a ``ttft>=2`` is refused, never read as ``ttft<=2``.
"""

from __future__ import annotations

import re
from typing import Final

from exporter.settings.reader import Section, Substituted
from exporter.stats.objectives import GoodputBounds, SloMetric

# Flag order (as the docs list them); a Section sorts them in its own messages.
GOODPUT_KEYS: Final = ("ttft", "tpot", "e2e", "max_tbt", "normalized_latency", "min_fluidity")
# The comparison each bound is written with: a latency is good at or below, fluidity at or above.
GOODPUT_OPERATORS: Final = {
    key: (SloMetric.FLUIDITY if key == "min_fluidity" else SloMetric.TTFT).operator for key in GOODPUT_KEYS
}
_BOUND = re.compile(r"\s*(?P<name>[^<>=!]*?)\s*(?P<operator>[<>!=]=?|=>|=<)\s*(?P<value>.*?)\s*")


def read_goodput(sec: Section) -> GoodputBounds:
    """The bounds of one ``goodput`` mapping; a bad value is a problem under its key."""
    latencies = {
        key: sec.opt_duration(key, None, positive=False) for key in GOODPUT_KEYS if key != "min_fluidity"
    }
    return GoodputBounds(**latencies, min_fluidity=sec.opt_number("min_fluidity", None, 0.0, 1.0))


def goodput_mapping(text: str) -> dict[str, Substituted]:
    """``"ttft<=2,tpot<=0.1,min_fluidity>=0.9"`` as a ``goodput`` mapping for ``read_goodput``; a
    ValueError names the first bound written wrong (a bad value is ``read_goodput``'s to find)."""
    # Substituted: each value is read as YAML reads a scalar, so "2" is a number and "250ms" a duration.
    return dict(_bound(item) for item in text.split(","))


def _bound(item: str) -> tuple[str, Substituted]:
    """``"ttft<=2" -> ("ttft", "2")``, checking the name and that its comparison is the bound's own."""
    match = _BOUND.fullmatch(item)
    name = match["name"] if match else item.strip()
    if name not in GOODPUT_OPERATORS:
        raise ValueError(f'unknown bound "{name}"; valid: {", ".join(GOODPUT_KEYS)}')
    valid = GOODPUT_OPERATORS[name]
    if match is None or match["operator"] != valid:
        operator = match["operator"] if match else "no comparison"
        raise ValueError(
            f'"{item.strip()}": {name} takes {valid} only (got {operator}), e.g. {name}{valid}{_EXAMPLE[name]}'
        )
    if not match["value"]:
        raise ValueError(f'"{item.strip()}" needs a number, e.g. {name}{valid}{_EXAMPLE[name]}')
    return name, Substituted(match["value"])


_EXAMPLE: Final = {key: "0.9" if key == "min_fluidity" else "2" for key in GOODPUT_KEYS}
