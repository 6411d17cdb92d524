"""``fluidity-exporter capacity``: a one-shot capacity search from the command line.

Against ``--url`` (by default the built-in simulator in a child process) it runs the same search as the
daemon's ``POST /api/v1/jobs/capacity``: the flags become the same parameters, parsed by the same
parser (``exporter.config.job_parse``), without the daemon's ceilings (the person at the terminal is the
authority). It prints a progress bar and one line per trial, then a report, and writes
``capacity.json`` (and ``capacity.png`` with the ``plots`` extra: headroom against load, the
capacity marked) into ``--output`` (default: a new ``capacity-results/<UTC time>/``; an existing
result is replaced only with ``--force``) and says where. Exit codes as ``bench``'s (``exporter.cli``):
1 when the target failed (every trial sunk by errors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from exporter.cli import EXIT_FAILED, EXIT_MEASURED, EXIT_USAGE, Command
from exporter.config.job_params import CapacityParams, JobLimits
from exporter.config.job_parse import ParamsError, parse_params
from exporter.config.model import SloConfig
from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity import CapacityResult
from exporter.jobs.manager import JobFailedError
from exporter.jobs.runners import (
    SearchProgress,
    resolve_trial_slo,
    result_line,
    run_capacity_search,
    search_settings,
    time_budget,
)
from exporter.jobs.trial import TrialReport, TrialSlo
from exporter.load.cpus import available_cpus
from exporter.load.shard_local import local_shards
from exporter.load.shard_pool import ShardPool
from exporter.load.shard_protocol import PoolSettings
from exporter.oneshot import (
    BenchError,
    add_target_arguments,
    discover,
    merged_options,
    prefill_model_file,
    refuse_overwrite,
    skip_calibration,
    target_settings,
    target_url,
    timestamped,
    workload_from_options,
)
from exporter.probe import loop as event_loop
from exporter.probe.client import ProbeClient
from exporter.probe.target import TargetSettings
from exporter.stats.slo import DECODE_TIERS

NO_CEILINGS = JobLimits(
    max_rate=1e9, max_concurrency=10**9, max_duration_s=1e12, max_tokens=10**15, max_trials=1000,
    max_requests_per_trial=10**9, max_prompt_tokens=10**9, max_workers=10**6,
)  # fmt: skip
BAR_WIDTH = 24
PROGRESS_EVERY_S = 10.0
DEFAULT_CLI_BUDGET_S = 3240.0  # as the daemon's default: 90% of jobs.limits.max_duration_s (1 hour)
SLO_FLAGS = (
    ("decode_tier", "decode_tier"),
    ("decode_deadline", "decode_deadline_s"),
    ("target_fluidity", "target_fluidity"),
    ("percentile", "percentile"),
    ("objective", "objectives"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``capacity``."""
    add_target_arguments(parser)
    load = parser.add_argument_group("workload and load")
    load.add_argument("--workload", help="a workload preset (default sharegpt)")
    load.add_argument("--prompt-tokens", help="custom prompt lengths instead of a preset, e.g. fixed:512")
    load.add_argument("--output-tokens", help="custom output lengths, e.g. fixed:128")
    load.add_argument("--max-prompt-tokens", type=int, help="filter: longest prompt")
    load.add_argument("--max-output-tokens", type=int, help="filter: longest output")
    load.add_argument(
        "--turns", help="turns per session: N or a distribution (default 1; the load is then sessions)"
    )
    load.add_argument("--think-time", help="seconds between a session's turns, e.g. fixed:2")
    load.add_argument(
        "--load", choices=("rate", "concurrency"), help="search requests/s or concurrency (rate)"
    )
    load.add_argument(
        "--arrival", help="arrival process without its rate: poisson, constant, gamma:shape=0.5"
    )
    load.add_argument("--start", type=float, help="first load tried (default 1)")
    load.add_argument("--max-load", type=float, help="never try above this load")
    load.add_argument(
        "--min-load", type=float, help="the floor: a failure here means not met (default: a 15-minute trial)"
    )
    load.add_argument("--time-budget", type=float, help="seconds the whole search may take (default 3240)")
    load.add_argument(
        "--confidence", type=float, help="of each trial's pass-fraction interval (default 0.95)"
    )
    load.add_argument("--tolerance", type=float, help="relative tolerance of the answer (default 0.05)")
    load.add_argument("--max-trials", type=int, help="most trials (default 8)")
    load.add_argument("--requests-per-trial", type=int, help="measured requests per trial (default 200)")
    load.add_argument("--warmup-requests", type=int, help="unmeasured requests first (default 20)")
    load.add_argument(
        "--trial-duration",
        type=float,
        help="end a trial after this many seconds (default 1.5x its span + 60)",
    )
    load.add_argument("--no-early-stop", action="store_true", default=None, help="run every trial in full")
    load.add_argument("--seed", type=int, help="random seed of the workload (default 0)")
    load.add_argument(
        "--workers", type=int, help="client processes sending each trial, results merged (default 1)"
    )
    slo = parser.add_argument_group("SLO (default: 99%% of requests reach fluidity >= 0.9 at Dd 50 ms)")
    slo.add_argument("--decode-tier", help=f"decode deadline tier: {', '.join(DECODE_TIERS)} (medium)")
    slo.add_argument("--decode-deadline", type=float, help="decode deadline in seconds instead of a tier")
    slo.add_argument("--prefill-deadline", type=float, help="constant Dp in seconds (default 1.0)")
    slo.add_argument("--prefill-model", help="a profiled prefill model (JSON, from `profile`) for Dp(P)")
    slo.add_argument("--scheduling-slack", type=float, help="added to the model's Dp (default 0)")
    slo.add_argument("--target-fluidity", type=float, help="fluidity a request must reach (0.9)")
    slo.add_argument("--percentile", type=float, help="share of requests that must reach it, in %% (99)")
    slo.add_argument("--objective", action="append", help="an extra SLO, e.g. ttft:p99<=2 (repeatable)")
    cost = parser.add_argument_group("cost")
    cost.add_argument("--gpus", type=float, help="accelerators behind the target: tokens per GPU-second")
    cost.add_argument("--gpu-hour-price", type=float, help="price of one GPU-hour: cost of a million tokens")
    out = parser.add_argument_group("output")
    out.add_argument(
        "--output", help="directory for capacity.json (and .png); default capacity-results/<UTC time>/"
    )
    out.add_argument("--force", action="store_true", default=None, help="replace an earlier result")
    out.add_argument("--json", action="store_true", default=None, help="print the result as JSON")
    out.add_argument("--no-plot", action="store_true", default=None, help="skip capacity.png")
    parser.add_argument("--config", help="YAML file whose keys are these flags' names")


def capacity_params(options: dict[str, Any]) -> CapacityParams:
    """The flags as the API's parameters, through the API's own parser."""
    body: dict[str, Any] = {"target": "cli"}
    for flag, key in (
        ("load", "load"), ("arrival", "arrival"), ("start", "start"), ("max_load", "max_load"),
        ("tolerance", "tolerance"), ("max_trials", "max_trials"), ("seed", "seed"),
        ("requests_per_trial", "requests_per_trial"), ("warmup_requests", "warmup_requests"),
        ("trial_duration", "trial_duration_s"), ("workers", "workers"), ("min_load", "min_load"),
        ("time_budget", "time_budget_s"), ("confidence", "confidence"),
    ):  # fmt: skip
        if options[flag] is not None:
            body[key] = options[flag]
    if options["no_early_stop"]:
        body["early_stop"] = False
    slo = {key: options[flag] for flag, key in SLO_FLAGS if options[flag] is not None}
    if slo:
        body["slo"] = slo
    try:
        params = parse_params("capacity", body, NO_CEILINGS)
    except ParamsError as exc:
        raise BenchError("; ".join(problem.replace("slo.", "--") for problem in exc.problems)) from exc
    assert isinstance(params, CapacityParams)
    return params


def trial_slo(options: dict[str, Any], params: CapacityParams) -> TrialSlo:
    """The job's SLO resolved as the daemon resolves it, with the default SLO config in place of a
    target's and ``Dp`` from the flags."""
    deadlines = DeadlinePolicy(
        prefill_deadline=options["prefill_deadline"] or DeadlinePolicy.prefill_deadline,
        prefill_model=prefill_model_file(options["prefill_model"]),
        scheduling_slack=options["scheduling_slack"] or 0.0,
    )
    try:
        return resolve_trial_slo(params.slo, SloConfig(), deadlines)
    except JobFailedError as exc:
        raise BenchError(f"--decode-tier: {exc}") from exc


def progress_line(fraction: float, message: str) -> str:
    """A bar and what happens now (a trial starting, its requests done, a trial's outcome)."""
    bar = "#" * round(min(max(fraction, 0.0), 1.0) * BAR_WIDTH)
    return f"[{bar:<{BAR_WIDTH}}] {fraction:4.0%} {message}"


class ProgressPrinter:
    """Progress lines on stderr: every trial's start and outcome, and its requests at most every
    ``every_s`` seconds (the first trial of a slow target takes minutes: it must not be silent)."""

    def __init__(
        self, every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s, self.clock, self.last = every_s, clock, -math.inf

    def __call__(self, fraction: float, message: str) -> None:
        now = self.clock()
        in_trial = message.endswith(" done") and not message.startswith("capacity")
        if in_trial and now - self.last < self.every_s:
            return
        self.last = now
        print(progress_line(fraction, message), file=sys.stderr)


def report(result: CapacityResult) -> str:
    lines = [
        f"{'load':>10} {'verdict':>14} {'headroom':>9} {'pass fraction [95% interval]':>29} {'tokens':>10} "
        f"{'seconds':>8}"
    ]
    for trial in result.trials:
        verdict = trial.verdict if trial.verdict != "fail" else f"fail ({trial.reason})"
        lines.append(
            f"{trial.load:>10.4g} {verdict:>14} {trial.headroom:>9.3f} {_fraction(trial):>29} "
            f"{trial.tokens:>10} {trial.duration_s:>8.1f}"
        )
    lines.append(f"answer ({result.state}): {result_line(result)}")
    if result.lower_bound is not None:
        rate, good = result.figure("fluid_token_rate"), result.figure("goodput_rate")
        lines.append(
            f"at {result.lower_bound:.4g}: fluid token rate {_maybe(rate)} tokens/s; goodput {_maybe(good)} "
            "req/s (requests meeting the SLO per second of offered load)"
        )
    lines += [_cost_line(at, point, result.state == "found") for at, point in result.costs().items()]
    lines.append(f"{len(result.trials)} trials, {result.tokens} tokens, {result.duration_s:.1f} s")
    return "\n".join(lines)


def _fraction(trial: TrialReport) -> str:
    share, bounds = trial.figures.get("fluid_share"), trial.figures.get("pass_interval")
    if not isinstance(share, float):
        return "-"
    return f"{share:.1%} [{bounds[0]:.1%}, {bounds[1]:.1%}]" if bounds else f"{share:.1%}"


def _cost_line(at: str, point: dict[str, float | None], found: bool) -> str:
    where = "at the highest load tried"
    if at == "capacity":
        where = "at capacity" if found else "at the lower bound"
    text = (
        f"{where} ({point['load']:.4g}): fluid goodput {_maybe(point['fluid_goodput_tokens_per_s'])} tokens/s"
    )
    if point["fluid_tokens_per_gpu_second"] is not None:
        text += f", {point['fluid_tokens_per_gpu_second']:.4g} fluid tokens per GPU-second"
    if point["cost_per_million_fluid_tokens"] is not None:
        text += f", {point['cost_per_million_fluid_tokens']:.4g} per million fluid tokens"
    return text


def _maybe(value: float | None) -> str:
    return f"{value:.4g}" if value is not None else "-"


def write_plot(path: Path, result: CapacityResult) -> Path:
    """Headroom against load: passes and failures, headroom 1 and the capacity marked."""
    from exporter.report.plots import pyplot, save_figure

    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    for passed, marker, label in ((True, "o", "pass"), (False, "x", "fail")):
        trials = [t for t in result.trials if t.passed is passed and math.isfinite(t.headroom)]
        axes.scatter([t.load for t in trials], [t.headroom for t in trials], marker=marker, label=label)
    for trial in result.trials:
        if math.isfinite(trial.headroom):
            axes.annotate(str(trial.index), (trial.load, trial.headroom), fontsize=7)
    axes.axhline(1.0, color="grey", linestyle=":", label="SLO boundary")
    if result.capacity is not None:
        axes.axvline(result.capacity, color="green", linestyle="--", label=f"capacity {result.capacity:.3g}")
    axes.set_yscale("log")
    axes.set_xlabel("requests/s" if result.load_kind == "rate" else "concurrency")
    axes.set_ylabel("deadline headroom (>= 1 meets the SLO)")
    axes.legend()
    return save_figure(plt, figure, path)


async def _search(
    options: dict[str, Any], params: CapacityParams, slo: TrialSlo, url: str, simulated: bool
) -> CapacityResult:
    settings = target_settings(options, url)
    facts = await discover(settings, skip_calibration(options, simulated))  # calibrated prompts, context
    for line in facts.describe():
        print(line, file=sys.stderr)
    workload = workload_from_options(options, simulated, facts)
    printer = ProgressPrinter() if not options["json"] else (lambda fraction, message: None)
    progress = SearchProgress(params, printer)
    async with ProbeClient(settings) as client, worker_pool(params.workers, settings) as pool:
        result = await run_capacity_search(
            params, search_settings(params, NO_CEILINGS, slo), workload, slo, lambda: client,
            on_trial=progress.trial_done, pool=pool, time_budget_s=time_budget(params, NO_CEILINGS)
            if params.time_budget_s is not None else DEFAULT_CLI_BUDGET_S, progress=progress,
        )  # fmt: skip
    result.gpus, result.gpu_hour_price = options["gpus"], options["gpu_hour_price"]
    progress.finished(result)
    return result


@contextlib.asynccontextmanager
async def worker_pool(
    workers: int | None, settings: TargetSettings, pool_settings: PoolSettings | None = None
) -> AsyncIterator[ShardPool | None]:
    """``workers`` local shard processes (None for one: this process sends), with a word on stderr when
    there are more than the CPUs this machine or container may use."""
    if not workers or workers <= 1:
        yield None
        return
    cpus = available_cpus()
    if workers > cpus:
        print(f"note: {workers} workers on {cpus} usable CPUs: they will share them", file=sys.stderr)
    async with contextlib.AsyncExitStack() as stack:
        try:
            pool = await stack.enter_async_context(local_shards(workers, settings.api_key, pool_settings))
        except TimeoutError as exc:  # a worker that never started
            raise BenchError(f"--workers: {exc}") from exc
        yield pool


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the search measured the target, 1 when every trial was sunk by the target's errors or
    a worker process made a trial's load other than planned, 2 on bad input (or an earlier result in
    the way)."""
    try:
        options = merged_options(args)
        params = capacity_params(options)
        slo = trial_slo(options, params)  # bad deadlines fail before any load is sent
        directory = Path(options["output"]) if options["output"] else timestamped("capacity-results")
        refuse_overwrite(directory / "capacity.json", bool(options["force"]))
        with target_url(options) as (url, simulated):
            result = event_loop.run(_search(options, params, slo, url, simulated))
    except (BenchError, JobFailedError) as exc:
        print(f"fluidity-exporter capacity: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "capacity.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result.to_dict(), indent=2) if options["json"] else report(result))
    print(f"wrote {directory / 'capacity.json'}", file=sys.stderr)
    if not options["no_plot"]:
        try:
            print(f"wrote {write_plot(directory / 'capacity.png', result)}", file=sys.stderr)
        except RuntimeError as exc:  # the plots extra is not installed
            print(f"no plot: {exc}", file=sys.stderr)
    target_failed = all(trial.reason == "errors" for trial in result.trials)
    unreliable = result.stopped_by.startswith("shards: ")  # a worker late, dead or saturated
    return EXIT_FAILED if target_failed or unreliable else EXIT_MEASURED


CAPACITY_COMMAND = Command("search the highest load that meets a fluidity SLO", add_arguments, run)
