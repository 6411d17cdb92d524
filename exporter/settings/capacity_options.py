"""The options of the ``capacity`` command, read once from its flags.

The search's flags become the jobs API's parameters through its own parser
(``exporter.settings.job_parse``), without the daemon's ceilings (the person at the terminal is the
authority): ``CapacityParams``, each problem under the flag that gave it. Beside them: the target and
workload flags, ``Dp`` from the prefill flags, ``--gpus`` and ``--gpu-hour-price``, and the output flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.settings.bounds import MAX_JOB_REQUESTS_PER_TRIAL, MAX_JOB_TRIALS
from exporter.settings.cost import COST_KEYS, Cost, read_cost
from exporter.settings.evaluation_flags import read_prefill_flags
from exporter.settings.job_params import CapacityParams, JobLimits
from exporter.settings.job_parse import parse_params
from exporter.settings.oneshot import FlagReading, RawFlags, checked_workers, flag_problem, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.slo import Slo
from exporter.settings.target_flags import TargetFlags, read_target_flags
from exporter.settings.workload_flags import WorkloadFlags, read_workload_flags

# The command runs on the user's own machine, against their own target: no ceilings of the daemon's,
# but the highest its config could set for the trials and their requests (a trial of 10^9 requests was
# accepted, planned in memory at ~150 MB/s, deaf to Ctrl-C while it was).
CLI_LIMITS = JobLimits(
    max_rate=1e9, max_concurrency=10**9, max_duration_s=1e12, max_tokens=10**15, max_trials=MAX_JOB_TRIALS,
    max_requests_per_trial=MAX_JOB_REQUESTS_PER_TRIAL, max_prompt_tokens=10**9, max_workers=10**6,
)  # fmt: skip
# Flag name -> the jobs API's parameter (top level, then under "slo").
PARAM_OPTIONS = (
    ("load", "load"), ("arrival", "arrival"), ("start", "start"), ("max_load", "max_load"),
    ("tolerance", "tolerance"), ("max_trials", "max_trials"), ("seed", "seed"),
    ("requests_per_trial", "requests_per_trial"), ("warmup_requests", "warmup_requests"),
    ("trial_duration", "trial_duration_s"), ("workers", "workers"), ("min_load", "min_load"),
    ("time_budget", "time_budget_s"), ("confidence", "confidence"),
)  # fmt: skip
SLO_OPTIONS = (
    ("decode_tier", "decode_tier"),
    ("decode_deadline", "decode_deadline_s"),
    ("target_fluidity", "target_fluidity"),
    ("percentile", "percentile"),
    ("objective", "objectives"),
)
# The flag of each parameter's path, so a problem the jobs API's parser finds names the flag.
CAPACITY_FLAGS = {key: "--" + option.replace("_", "-") for option, key in PARAM_OPTIONS} | {
    f"slo.{key}": "--" + option.replace("_", "-") for option, key in SLO_OPTIONS
}
# What the parser names by the jobs API's keys, in the command's own words: it has no config of
# ``jobs.limits`` to raise (``CLI_LIMITS`` are the most any config could set).
CLI_WORDS = {
    "requests_per_trial + warmup_requests": "--requests-per-trial + --warmup-requests",
    "jobs.limits.max_trials": "the most trials a search may run",
    "jobs.limits.max_requests_per_trial": "the most requests a trial may send",
    "jobs.limits.max_duration": "the longest a search may run",
    "jobs.limits.max_rate": "the highest rate a search may try",
    "jobs.limits.max_concurrency": "the highest concurrency a search may try",
    "jobs.limits.max_prompt_tokens": "the longest prompt a search may send",
}


@dataclass(frozen=True)
class CapacityOptions:
    """Everything ``capacity`` was told: the target, the workload each trial sends, the search's
    parameters (``params``), ``Dp`` (``deadlines``: an SLO of defaults but its prefill deadline or
    model), the target's accelerators and their price, and where and how the result is written."""

    target: TargetFlags
    workload: WorkloadFlags
    params: CapacityParams
    deadlines: Slo
    cost: Cost
    output: str | None = None
    force: bool = False
    json: bool = False
    plots: bool | None = None  # None: not said (on)


def read_capacity_options(raw: RawFlags) -> CapacityOptions:
    """``capacity``'s flags, every bad one reported together, before any load is sent."""
    reading = FlagReading()
    params = reading(lambda: capacity_params(raw))
    reading(lambda: checked_workers(params.workers) if params is not None else None)
    deadlines = reading(lambda: read_prefill_flags(raw))
    target = reading(lambda: read_target_flags(raw))
    workload = reading(lambda: read_workload_flags(raw, target.settings.api if target else None))
    cost = reading(lambda: read_cost_flags(raw))
    reading.done()
    assert params is not None and deadlines is not None and target is not None
    assert workload is not None and cost is not None
    return CapacityOptions(
        target, workload, params, deadlines, cost,
        output=raw.get("output"), force=bool(raw.get("force")), json=bool(raw.get("json")),
        plots=raw.get("plots"),
    )  # fmt: skip


def capacity_params(raw: RawFlags) -> CapacityParams:
    """The search's flags as the API's parameters, through the API's own parser."""
    _refuse_conflicts(raw)
    body: dict[str, Any] = {"target": "cli"}
    body |= {key: raw[option] for option, key in PARAM_OPTIONS if raw.get(option) is not None}
    if raw.get("no_early_stop"):
        body["early_stop"] = False
    slo = {key: raw[option] for option, key in SLO_OPTIONS if raw.get(option) is not None}
    if slo:
        body["slo"] = slo
    try:
        params = parse_params("capacity", body, CLI_LIMITS)
    except SettingsError as exc:
        raise SettingsError(
            "; ".join(_cli_words(flag_problem(problem, CAPACITY_FLAGS)) for problem in exc.problems)
        ) from exc
    assert isinstance(params, CapacityParams)
    return params


def read_cost_flags(raw: RawFlags) -> Cost:
    """``--gpus`` and ``--gpu-hour-price``, read as ``targets[].gpus`` and ``gpu_hour_price`` are (each
    flag is its key with dashes, so no flag needs naming)."""
    values = {key: raw[key] for key in COST_KEYS if raw.get(key) is not None}
    return read_flags(values, COST_KEYS, read_cost, {})


def _cli_words(message: str) -> str:
    """A problem with each jobs API key it names (``CLI_WORDS``) said in the command's words."""
    for key, words in CLI_WORDS.items():
        message = message.replace(key, words)
    return message


def _refuse_conflicts(raw: RawFlags) -> None:
    """Flags of which one would be ignored without a word (--decode-tier with --decode-deadline is the
    parser's own rule, the same for a jobs API body)."""
    if raw.get("load") == "concurrency" and raw.get("arrival") is not None:
        raise SettingsError(
            "--arrival: only a rate search (--load rate) has arrivals; a concurrency search keeps its "
            "requests in flight, so drop --arrival"
        )
