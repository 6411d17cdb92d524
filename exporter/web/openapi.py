"""The jobs API's OpenAPI document as the running daemon accepts it.

``openapi.json`` beside this file is the committed document: every route, every field, the static
rules. A daemon serves it made exact for its own config (``document_for``): ``target`` is one of the
configured targets (an empty or unknown one is not schema-valid, as the API refuses it), ``module``
one of that target's modules, and every number bounded by ``jobs.limits`` (``start`` and ``max_load``
by ``max_rate`` for a rate search, by ``max_concurrency`` and whole for a concurrency search). An API
fuzzer reading the served document then generates only requests the API takes, and everything it calls
invalid is refused. Two rules remain that JSON Schema cannot state, each said in its field's
description: ``min_load <= start <= max_load``, ``requests_per_trial + warmup_requests`` within
``max_requests_per_trial``, and a concurrency within half of that sum (``concurrency_ceiling``).
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
from collections.abc import Mapping
from typing import Any

from exporter.settings.job_params import MIN_TRIAL_S, JobLimits
from exporter.settings.job_parse import default_max_trials, default_requests, default_warmup
from exporter.settings.reader import MAX_DURATION_S
from exporter.stats.objectives import DECODE_TIERS, SloMetric


@functools.cache
def committed_document() -> bytes:
    """The committed OpenAPI document, read from the package once."""
    return importlib.resources.files("exporter.web").joinpath("openapi.json").read_bytes()


def document_for(targets: Mapping[str, tuple[str, ...]], limits: JobLimits) -> dict[str, Any]:
    """The committed document with the configured targets, modules and ``jobs.limits`` in it."""
    document: dict[str, Any] = copy.deepcopy(json.loads(committed_document()))
    schemas = document["components"]["schemas"]
    names = sorted(targets)
    for name in ("CapacityParams", "ProfileParams"):
        schemas[name]["properties"]["target"].update(enum=names, minLength=1)
    _capacity(schemas["CapacityParams"], targets, limits)
    _profile(schemas["ProfileParams"], limits)
    _slo(schemas["SloSpec"], schemas["GoodputBounds"])
    _nulls(schemas)
    return document


def _nulls(schemas: dict[str, Any]) -> None:
    """The fields the API reads ``null`` in as "left out" (their default), said in the schema too."""
    slo = schemas["CapacityParams"]["properties"]["slo"]
    schemas["CapacityParams"]["properties"]["slo"] = {"anyOf": [slo, {"type": "null"}]}
    schemas["ProfileParams"]["properties"]["lengths"]["oneOf"].append({"type": "null"})
    schemas["SloSpec"]["properties"]["objectives"]["type"] = ["array", "null"]


# A duration as seconds: the form the served document gives for every duration. Strings such as "30s"
# are accepted too; a pattern cannot bound them exactly, so only where the bounds are fixed (> 0 and at
# most MAX_DURATION_S) does the document allow the strings DURATION_PATTERN matches, each within them.
def _seconds(low_open: bool, maximum: float = MAX_DURATION_S) -> dict[str, Any]:
    low: dict[str, Any] = {"exclusiveMinimum": 0} if low_open else {"minimum": 0}
    return {"type": ["number", "null"], **low, "maximum": maximum}


def _positive(digits: int) -> str:
    """A number > 0 with at most ``digits`` before the point and 3 after it."""
    return rf"([1-9][0-9]{{0,{digits - 1}}}(\.[0-9]{{1,3}})?|0\.[0-9]{{0,2}}[1-9])"


# One number and unit, > 0 and, by the digits each unit may have, under 116 days (MAX_DURATION_S: 366).
_UNIT_DIGITS = {"ms": 9, "s": 7, "m": 5, "h": 3, "d": 2}
DURATION_PATTERN = "^(" + "|".join(_positive(n) + unit for unit, n in _UNIT_DIGITS.items()) + ")$"


def _duration_string_or_seconds() -> dict[str, Any]:
    """A deadline: seconds > 0, or a duration string such as ``40ms`` (as the description says)."""
    return {**_seconds(low_open=True), "type": ["number", "string", "null"], "pattern": DURATION_PATTERN}


_NUMBER = r"(0|[1-9][0-9]{0,5})(\.[0-9]{1,6})?"
_PERCENTILE = r"(100|[1-9][0-9]?(\.[0-9]{1,3})?)"
_LOWER_IS_BETTER = "|".join(sorted(m.value for m in SloMetric if not m.higher_is_better))
OBJECTIVE_PATTERN = f"^(({_LOWER_IS_BETTER}):p{_PERCENTILE}<={_NUMBER}|fluidity:p{_PERCENTILE}>={_NUMBER})$"
ARRIVAL_PATTERN = r"^(poisson|constant|gamma(:shape=[1-9][0-9]?(\.[0-9]{1,3})?)?)$"


def _slo(slo: dict[str, Any], goodput: dict[str, Any]) -> None:
    props = slo["properties"]
    props["decode_tier"]["enum"] = list(DECODE_TIERS)
    for key in ("decode_deadline_s", "prefill_deadline_s"):
        props[key].update(_duration_string_or_seconds())
    props["objectives"]["items"]["pattern"] = OBJECTIVE_PATTERN
    for key, value in goodput["properties"].items():
        if key != "min_fluidity":
            value.update(_seconds(low_open=False))


def _capacity(schema: dict[str, Any], targets: Mapping[str, tuple[str, ...]], limits: JobLimits) -> None:
    props = schema["properties"]
    # The defaults as the parser applies them, within this config's limits (not the dataclass's).
    props["max_trials"].update(maximum=limits.max_trials, default=default_max_trials(limits))
    warmup = default_warmup(limits)
    props["warmup_requests"]["default"] = warmup
    props["requests_per_trial"]["default"] = default_requests(limits, warmup)
    ceiling = limits.max_requests_per_trial
    props["requests_per_trial"]["maximum"] = ceiling
    props["warmup_requests"]["maximum"] = ceiling - props["requests_per_trial"]["minimum"]
    props["trial_duration_s"].update(
        _seconds(low_open=False, maximum=limits.max_duration_s), minimum=MIN_TRIAL_S
    )
    props["time_budget_s"].update(
        _seconds(low_open=False, maximum=limits.max_duration_s), minimum=MIN_TRIAL_S
    )
    props["arrival"]["pattern"] = ARRIVAL_PATTERN
    props["seed"]["minimum"] = 0
    props["workers"]["maximum"] = limits.max_workers
    props["start"]["description"] += "; at most max_load"
    conditions: list[dict[str, Any]] = [
        {  # a module must be one of the target's own
            "if": {"properties": {"target": {"const": name}}, "required": ["target"]},
            "then": {"properties": {"module": {"enum": [*modules, None]}}},
        }
        for name, modules in sorted(targets.items())
    ]
    concurrency = {"properties": {"load": {"const": "concurrency"}}, "required": ["load"]}
    whole = {"type": ["integer", "null"], "maximum": limits.max_concurrency}
    rate = {"type": ["number", "null"], "maximum": limits.max_rate}
    conditions.append(
        {
            "if": concurrency,
            "then": {"properties": {"start": whole, "max_load": whole, "min_load": whole}},
            "else": {"properties": {"start": rate, "max_load": rate, "min_load": rate}},
        }
    )
    schema["allOf"] = conditions


def _profile(schema: dict[str, Any], limits: JobLimits) -> None:
    schema["properties"]["workers"]["maximum"] = limits.max_workers
    lengths = schema["properties"]["lengths"]["oneOf"]
    lengths[0]["items"]["maximum"] = limits.max_prompt_tokens
    for key in ("low", "high"):
        lengths[1]["properties"][key]["maximum"] = limits.max_prompt_tokens
    lengths[1]["description"] += " (low <= high)"
