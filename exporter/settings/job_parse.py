"""Job parameters from plain data, with every problem listed at once, as the config lists its own.

The same reader serves an HTTP body (``POST /api/v1/jobs/capacity``), a scheduled job in the config
(``jobs.schedules[*].params``, where the problems sit under that path) and the CLI, so a parameter means
the same and fails with the same message wherever it is given. Keys are the dataclass field names of
``exporter.settings.job_params``; ``_s`` fields take seconds or a duration string such as ``30s``.

Every value is also checked against the ``JobLimits`` (``jobs.limits`` in the config): a request for
more than an operator allows is refused with a problem naming the limit. Defaults that a low limit
would make invalid are lowered to the limit, so a body that leaves a field out never fails because of
it.

``params_to_dict`` is the JSON form (what a job record stores and the API shows); ``parse_params``
reads it back to the same parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar, cast

from exporter.settings.arrival import arrival_without_rate
from exporter.settings.goodput import GOODPUT_KEYS, read_goodput
from exporter.settings.job_params import (
    DEFAULT_HIGH,
    DEFAULT_LOW,
    JOB_KINDS,
    LOAD_KINDS,
    MIN_TRIAL_S,
    CapacityParams,
    JobKind,
    JobLimits,
    JobParams,
    LoadKind,
    ProfileParams,
    concurrency_ceiling,
    distinct_lengths,
    geometric_ladder,
)
from exporter.settings.problems import Problems, SettingsError, literal
from exporter.settings.reader import Section, show
from exporter.settings.slo import SloSpec, read_objectives, read_percentile, read_target_fluidity
from exporter.stats.objectives import DECODE_TIERS

CAPACITY_KEYS = tuple(f.name for f in fields(CapacityParams))
PROFILE_KEYS = tuple(f.name for f in fields(ProfileParams))
SLO_SPEC_KEYS = tuple(f.name for f in fields(SloSpec))
LADDER_KEYS = ("low", "high")
MIN_REQUESTS_PER_TRIAL = 10  # fewer cannot tell a p99 from the maximum
MAX_REPEATS = 100  # requests per prefill length: the minimum of 100 is as good as it gets
# Two ways to give the decode deadline; the ``{}`` name the settings (flags on the command line).
DECODE_PAIR = (
    f"give either {{}} (a tier: {', '.join(DECODE_TIERS)}) or {{}} (a deadline of its own), not both"
)

T = TypeVar("T")


def parse_params(kind: str, body: Mapping[str, Any], limits: JobLimits) -> JobParams:
    """The parameters of a ``kind`` job in ``body``; raises ``SettingsError`` listing every problem."""
    problems = Problems()
    if kind not in JOB_KINDS:
        problems.add("kind", f"unknown job kind {show(kind)}; valid: {', '.join(JOB_KINDS)}")
        raise SettingsError(problems.items)
    params = read_params(kind, body, "", problems, limits)
    if problems or params is None:
        raise SettingsError(problems.items)
    return params


def read_params(
    kind: JobKind, raw: Any, path: str, problems: Problems, limits: JobLimits
) -> JobParams | None:
    """The parameters at ``path`` with their problems added to ``problems`` (None: not a mapping).

    With problems the parameters hold defaults in place of the bad values: never run them.
    """
    keys = CAPACITY_KEYS if kind == "capacity" else PROFILE_KEYS
    sec = Section.open(raw, path, problems, keys)
    if sec is None:
        return None
    if kind == "capacity":
        return _capacity(sec, limits)
    return _profile(sec, limits)


def params_to_dict(params: JobParams) -> dict[str, Any]:
    """Every field as JSON data (objectives as their text); ``parse_params`` reads it back."""
    data = {f.name: getattr(params, f.name) for f in fields(params)}
    if isinstance(params, CapacityParams):
        data["slo"] = _slo_dict(params.slo)
    else:
        data["lengths"] = list(params.lengths)
    return data


def _slo_dict(slo: SloSpec) -> dict[str, Any]:
    data = {f.name: getattr(slo, f.name) for f in fields(slo)}
    data["objectives"] = [str(objective) for objective in slo.objectives]
    if slo.decode_deadline_s is not None:  # the tier does not apply, and the pair reads back refused
        del data["decode_tier"]
    if slo.goodput is not None:
        data["goodput"] = {f.name: getattr(slo.goodput, f.name) for f in fields(slo.goodput)}
    return data


# --- capacity search ---------------------------------------------------------------------------------


def _capacity(sec: Section, limits: JobLimits) -> CapacityParams:
    target, module = _target(sec), sec.opt_string("module")
    load = cast(LoadKind, sec.choice("load", "rate", LOAD_KINDS))
    arrival = sec.read("arrival", CapacityParams.arrival, arrival_without_rate)
    start, max_load = _loads(sec, load, limits)
    min_load = _load(sec, "min_load", load, limits)
    for key, value in (("start", start), ("max_load", max_load)):
        if min_load is not None and value is not None and min_load > value:
            sec.fail("min_load", f"{min_load:g} is above {key} ({value:g})")
    tolerance = sec.number("tolerance", CapacityParams.tolerance, 0.0, 0.5, low_open=True)
    max_trials = sec.integer("max_trials", default_max_trials(limits), minimum=1)
    _within(sec, "max_trials", max_trials, "max_trials", limits.max_trials)
    warmup, requests = _requests(sec, limits)
    if load == "concurrency":
        _closed_loop_fits(sec, {"start": start, "max_load": max_load, "min_load": min_load}, warmup, requests)
    trial_duration = _trial_duration(sec, limits)
    budget = sec.opt_duration("time_budget_s", None)
    if budget is not None:
        _within(sec, "time_budget_s", budget, "max_duration", limits.max_duration_s)
        if budget < MIN_TRIAL_S:  # the search would end before its first trial, with no answer
            sec.fail("time_budget_s", f"{budget:g} s is below one trial's minimum ({MIN_TRIAL_S:g} s)")
    confidence = sec.number("confidence", CapacityParams.confidence, 0.5, 0.999)
    slo = sec.section("slo", SLO_SPEC_KEYS)
    return CapacityParams(
        target=target,
        module=module,
        load=load,
        arrival=arrival,
        start=start,
        max_load=max_load,
        min_load=min_load,
        tolerance=tolerance,
        max_trials=max_trials,
        requests_per_trial=requests,
        warmup_requests=warmup,
        trial_duration_s=trial_duration,
        time_budget_s=budget,
        confidence=confidence,
        early_stop=sec.boolean("early_stop", CapacityParams.early_stop),
        seed=sec.integer("seed", CapacityParams.seed),
        slo=_slo(slo) if slo is not None else SloSpec(),
        workers=_workers(sec, limits),
    )


def _target(sec: Section) -> str:
    return sec.string("target", "") if sec.required("target") else ""


def _loads(sec: Section, load: LoadKind, limits: JobLimits) -> tuple[float | None, float | None]:
    """``start`` and ``max_load``, the first no higher than the second."""
    start, max_load = _load(sec, "start", load, limits), _load(sec, "max_load", load, limits)
    if start is not None and max_load is not None and start > max_load:
        sec.fail("start", f"{start:g} is above max_load ({max_load:g})")
    return start, max_load


def _load(sec: Section, key: str, load: LoadKind, limits: JobLimits) -> float | None:
    """``start`` or ``max_load``: requests/s for a rate search, a whole number in flight otherwise."""
    value = sec.opt_number(key, None, 0.0, low_open=True)
    if value is None:
        return None
    if load == "concurrency" and not value.is_integer():
        sec.fail(key, f"must be a whole number of requests in flight for a concurrency search, got {value:g}")
        return None
    if load == "rate":
        _within(sec, key, value, "max_rate", limits.max_rate)
    else:
        _within(sec, key, value, "max_concurrency", limits.max_concurrency)
    return value


def default_max_trials(limits: JobLimits) -> int:
    """``max_trials`` left out: the search's default, within ``jobs.limits.max_trials``."""
    return min(CapacityParams.max_trials, limits.max_trials)


def default_warmup(limits: JobLimits) -> int:
    """``warmup_requests`` left out: the default, at most a tenth of ``max_requests_per_trial``."""
    ceiling = limits.max_requests_per_trial
    return max(0, min(CapacityParams.warmup_requests, ceiling // 10, ceiling - MIN_REQUESTS_PER_TRIAL))


def default_requests(limits: JobLimits, warmup: int) -> int:
    """``requests_per_trial`` left out: the default, within ``max_requests_per_trial`` with ``warmup``."""
    ceiling = limits.max_requests_per_trial
    return max(MIN_REQUESTS_PER_TRIAL, min(CapacityParams.requests_per_trial, ceiling - warmup))


def _requests(sec: Section, limits: JobLimits) -> tuple[int, int]:
    """``(warmup_requests, requests_per_trial)``; together at most ``max_requests_per_trial``."""
    ceiling = limits.max_requests_per_trial
    warmup = sec.integer("warmup_requests", default_warmup(limits))
    requests = sec.integer(
        "requests_per_trial", default_requests(limits, warmup), minimum=MIN_REQUESTS_PER_TRIAL
    )
    if requests + warmup > ceiling:
        key = "requests_per_trial" if sec.has("requests_per_trial") else "warmup_requests"
        sec.fail(
            key,
            f"requests_per_trial + warmup_requests = {requests + warmup} exceeds "
            f"jobs.limits.max_requests_per_trial ({ceiling})",
        )
    return warmup, requests


def _closed_loop_fits(sec: Section, loads: dict[str, float | None], warmup: int, requests: int) -> None:
    """A concurrency no trial of ``warmup + requests`` can hold as a closed loop is refused."""
    ceiling = concurrency_ceiling(warmup, requests)
    for key, value in loads.items():
        if value is not None and value > ceiling:
            sec.fail(
                key,
                f"concurrency {value:g} is above {ceiling}, the most a trial of {warmup + requests} "
                "requests (warmup_requests + requests_per_trial) holds as a closed loop (every slot "
                "sends at least two); raise requests_per_trial",
            )


def _trial_duration(sec: Section, limits: JobLimits) -> float | None:
    seconds = sec.opt_duration("trial_duration_s", None)
    if seconds is not None:
        _within(sec, "trial_duration_s", seconds, "max_duration", limits.max_duration_s)
        if seconds < MIN_TRIAL_S:  # over before most warm-ups: the trial would measure nothing
            sec.fail("trial_duration_s", f"{seconds:g} s is below one trial's minimum ({MIN_TRIAL_S:g} s)")
    return seconds


def _within(sec: Section, key: str, value: float, limit_name: str, limit: float) -> None:
    if value > limit:
        sec.fail(key, _exceeds(value, limit_name, limit))


def _exceeds(value: float, limit_name: str, limit: float) -> str:
    return f"{value:g} exceeds jobs.limits.{limit_name} ({limit:g})"


def _value(problems: Problems, path: str, raw: Any, convert: Callable[[Any], T]) -> T | None:
    """``convert(raw)``, or None with its problem at ``path`` (for list items, which have no key)."""
    try:
        return convert(raw)
    except ValueError as exc:
        problems.add(path, str(exc))
        return None


# --- the SLO a capacity search holds the target to (overrides of a target's SLO, exporter.settings.slo) --


def _slo(sec: Section) -> SloSpec:
    decode_deadline = sec.opt_duration("decode_deadline_s", None)
    goodput = sec.section("goodput", GOODPUT_KEYS)
    return SloSpec(
        decode_tier=_decode_tier(sec, decode_deadline is not None),
        decode_deadline_s=decode_deadline,
        prefill_deadline_s=sec.opt_duration("prefill_deadline_s", None),
        target_fluidity=read_target_fluidity(sec),
        percentile=read_percentile(sec),
        objectives=read_objectives(sec),
        goodput=read_goodput(goodput) if goodput is not None else None,
        min_goodput_ratio=sec.opt_number("min_goodput_ratio", None, 0.0, 1.0, low_open=True),
    )


def _decode_tier(sec: Section, custom_deadline: bool) -> str:
    """One of the Etalon tiers; left out when ``decode_deadline_s`` gives a deadline of its own."""
    if custom_deadline:
        if sec.has("decode_tier"):  # one of the two would be ignored without a word
            sec.fail("decode_tier", DECODE_PAIR, mentions=("decode_tier", "decode_deadline_s"))
        return SloSpec.decode_tier
    tier = sec.read("decode_tier", SloSpec.decode_tier, lambda value: value)
    if isinstance(tier, str) and tier in DECODE_TIERS:  # a list or a mapping is no tier (nor hashable)
        return tier
    # The alternative is named as a setting, so the command line names its flag (--decode-deadline).
    what = (
        f"unknown decode tier {literal(show(tier))}"
        if isinstance(tier, str)
        else f"must be a tier, got {literal(show(tier))}"
    )
    sec.fail(
        "decode_tier",
        f"{what}; valid: {', '.join(DECODE_TIERS)} (or give {{}})",
        mentions=("decode_deadline_s",),
    )
    return SloSpec.decode_tier


# --- prefill profile ---------------------------------------------------------------------------------


def _profile(sec: Section, limits: JobLimits) -> ProfileParams:
    return ProfileParams(
        target=_target(sec),
        lengths=_lengths(sec, limits),
        repeats=sec.integer("repeats", ProfileParams.repeats, 1, MAX_REPEATS),
        apply=sec.boolean("apply", ProfileParams.apply),
        workers=_workers(sec, limits),
    )


def _workers(sec: Section, limits: JobLimits) -> int | None:
    """Client processes for the job, at most ``jobs.workers`` (None: that many)."""
    workers = sec.opt_integer("workers", None, minimum=1)
    if workers is not None and workers > limits.max_workers:
        sec.fail(
            "workers",
            f"{workers} exceeds jobs.workers ({limits.max_workers}), the most client processes a job may "
            "use (bounded by the CPUs the exporter's container may use)",
        )
    return workers


def _lengths(sec: Section, limits: JobLimits) -> tuple[int, ...]:
    """A list of prompt lengths, or ``{low, high}``: the doubling ladder between them."""
    raw, ceiling = sec.get("lengths"), limits.max_prompt_tokens
    if raw is None:
        return geometric_ladder(min(DEFAULT_LOW, ceiling), min(DEFAULT_HIGH, ceiling))
    if isinstance(raw, Mapping):
        return _ladder(Section(raw, sec.at("lengths"), sec.problems, LADDER_KEYS), ceiling)
    if not isinstance(raw, list):
        sec.fail("lengths", f"must be a list of prompt lengths or {{low, high}}, got {show(raw)}")
        return ()
    if not raw:
        sec.fail("lengths", "must list at least one prompt length")
    lengths = [
        _value(sec.problems, path, value, lambda v: _prompt_length(v, ceiling))
        for path, value in sec.items("lengths")
    ]
    given = tuple(length for length in lengths if length is not None)
    return _value(sec.problems, sec.at("lengths"), given, distinct_lengths) or given


def _ladder(sec: Section, ceiling: int) -> tuple[int, ...]:
    """``{low, high}``: powers of two from ``low`` with ``high`` kept (defaults: 128 and 16384)."""
    low = sec.integer("low", min(DEFAULT_LOW, ceiling), minimum=1)
    high = sec.integer("high", max(low, min(DEFAULT_HIGH, ceiling)), minimum=1)
    for key, value in (("low", low), ("high", high)):
        if sec.has(key):  # a default never exceeds the limit on its own
            _within(sec, key, value, "max_prompt_tokens", ceiling)
    if low > high:
        sec.fail("low", f"{low} is above high ({high})")
        return ()
    return geometric_ladder(low, high)


def _prompt_length(value: Any, ceiling: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a prompt length in tokens (an integer >= 1), got {show(value)}")
    if value > ceiling:
        raise ValueError(_exceeds(value, "max_prompt_tokens", ceiling))
    return value
