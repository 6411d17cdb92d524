"""``fluidity-exporter capacity``: a one-shot capacity search from the command line.

Against ``--url`` (by default the built-in simulator in a child process) it runs the same search as the
daemon's ``POST /api/v1/jobs/capacity`` (``exporter.jobs.local_capacity``): the flags become the same
parameters, parsed by the same parser, without the daemon's ceilings. It prints a progress bar and one
line per trial, then a report, and writes ``capacity.json`` (and ``capacity.png`` with the ``plots``
extra: headroom against load, each trial by its verdict, the answer and the bracket marked) into
``--output`` (default: a new ``capacity-results/<UTC time>/``; an existing result is replaced only with
``--force``) and says where. Exit codes as ``bench``'s (``exporter.cli``): 1 when the target failed
(every trial sunk by errors). Ctrl-C or SIGTERM writes the finished trials (state ``interrupted``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from exporter.cli.command import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MEASURED, EXIT_USAGE, Command
from exporter.cli.flags import (
    DeprecatedAlias,
    add_config_argument,
    add_prefill_arguments,
    add_target_arguments,
    add_workload_arguments,
    error,
    merged_options,
)
from exporter.cli.progress import ProgressPrinter
from exporter.jobs.capacity_report import capacity_table, write_capacity_json
from exporter.jobs.capacity_result import CapacityResult
from exporter.jobs.capacity_runner import trial_size_warning
from exporter.jobs.local_capacity import DEFAULT_BUDGET_S, LocalSearch, search_capacity, trial_slo
from exporter.jobs.manager import JobFailedError
from exporter.jobs.trial_verdict import TrialSlo
from exporter.load.target_facts import discover_target
from exporter.load.workload_options import build_workload, context_fit_note
from exporter.probe import loop as event_loop
from exporter.report.bench_report import OutputError, check_output_path, release, timestamped
from exporter.report.capacity_plot import HeadroomPoint, PlotAnswer, write_headroom_plot
from exporter.settings.capacity_options import CapacityOptions, read_capacity_options
from exporter.settings.job_params import MIN_TRIAL_S, CapacityParams
from exporter.settings.problems import SettingsError
from exporter.sim.process import SimStartError, url_or_simulator
from exporter.stats.objectives import (
    DECODE_TIERS,
    DEFAULT_DECODE_TIER,
    DEFAULT_PERCENTILE,
    DEFAULT_TARGET_FLUIDITY,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``capacity``."""
    add_target_arguments(parser)
    load = parser.add_argument_group("workload and load")
    add_workload_arguments(load)
    load.add_argument(
        "--turns", help="turns per session: N or a distribution (default 1; the load is then sessions)"
    )
    load.add_argument("--think-time", help="seconds between a session's turns, e.g. fixed:2")
    _add_search_arguments(load)
    slo = parser.add_argument_group(
        f"SLO (default: {DEFAULT_PERCENTILE:g}% of requests reach fluidity >= {DEFAULT_TARGET_FLUIDITY:g} "
        f"at Dd {DECODE_TIERS[DEFAULT_DECODE_TIER] * 1000:g} ms)"
    )
    slo.add_argument(
        "--decode-tier", help=f"decode deadline tier: {', '.join(DECODE_TIERS)} ({DEFAULT_DECODE_TIER})"
    )
    slo.add_argument(
        "--decode-deadline", type=float, help="decode deadline in seconds instead of --decode-tier"
    )
    add_prefill_arguments(slo)
    slo.add_argument(
        "--percentile",
        type=float,
        help=f"share of requests that must reach it, in %% ({DEFAULT_PERCENTILE:g})",
    )
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
    out.add_argument(
        "--plots", action=argparse.BooleanOptionalAction, default=None, help="write capacity.png (default on)"
    )
    out.add_argument(
        "--no-plot", dest="plots", action=DeprecatedAlias, use="--no-plots", kind="const", const=False
    )
    add_config_argument(parser)


def _add_search_arguments(load: argparse._ArgumentGroup) -> None:
    """What the search varies, where it starts and stops, and what each trial sends."""
    load.add_argument(
        "--load", choices=("rate", "concurrency"), help="search requests/s or concurrency (rate)"
    )
    load.add_argument(
        "--arrival",
        help="with --load rate: arrival process without its rate: poisson, constant, gamma:shape=0.5",
    )
    load.add_argument(
        "--start",
        type=float,
        help="first load tried (default: where a first look at the target says; concurrency 1)",
    )
    load.add_argument(
        "--max-load",
        type=float,
        help="never try above this load (a concurrency: at most half the trial's requests, warm-up included)",
    )
    load.add_argument(
        "--min-load", type=float, help="the floor: a failure here means not met (default: a 15-minute trial)"
    )
    defaults = CapacityParams
    load.add_argument(
        "--time-budget", type=float, help=f"seconds the whole search may take (default {DEFAULT_BUDGET_S:g})"
    )
    load.add_argument(
        "--confidence",
        type=float,
        help=f"of each trial's pass-fraction interval (default {defaults.confidence:g})",
    )
    load.add_argument(
        "--tolerance", type=float, help=f"relative tolerance of the answer (default {defaults.tolerance:g})"
    )
    load.add_argument("--max-trials", type=int, help=f"most trials (default {defaults.max_trials})")
    load.add_argument(
        "--requests-per-trial",
        type=int,
        help=f"measured requests per trial (default {defaults.requests_per_trial})",
    )
    load.add_argument(
        "--warmup-requests", type=int, help=f"unmeasured requests first (default {defaults.warmup_requests})"
    )
    load.add_argument(
        "--trial-duration",
        type=float,
        help=f"end a trial after this many seconds, at least {MIN_TRIAL_S:g} (default 1.5x its span + 60)",
    )
    load.add_argument("--no-early-stop", action="store_true", default=None, help="run every trial in full")
    load.add_argument("--seed", type=int, help=f"random seed of the workload (default {defaults.seed})")
    load.add_argument(
        "--workers",
        type=int,
        help="client processes sending each trial, results merged, at most the CPUs (default 1)",
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the search measured the target, 1 when every trial was sunk by the target's errors,
    a worker process made a trial's load other than planned or the answer rests on timings the client
    flagged unreliable, 2 on bad input (or an earlier result in the way)."""
    fresh: Path | None = None
    stopped: list[CapacityResult] = []  # what a search stopped by Ctrl-C or SIGTERM measured
    try:
        options = read_capacity_options(merged_options(args))
        slo = trial_slo(options.params, options.deadlines)  # bad deadlines fail before any load is sent
        small = trial_size_warning(options.params, slo)
        if small is not None:  # said before the run: it is no answer to wait minutes for
            print(f"fluidity-exporter capacity: warning: --requests-per-trial: {small}", file=sys.stderr)
        directory = Path(options.output) if options.output else timestamped("capacity-results")
        fresh = None if options.output else directory  # ours to remove if nothing is written
        check_output_path(directory / "capacity.json", options.force)
        with url_or_simulator(options.target.url, options.target.sim_preset) as (url, simulated):
            result = event_loop.run(_search(options, slo, url, simulated, stopped.append))
    except (SettingsError, OutputError, SimStartError, JobFailedError) as exc:
        release(fresh)
        error("capacity", exc)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM and SIGHUP (``exporter.cli.Terminated``)
        if not stopped or not stopped[0].trials:
            release(fresh)
            raise
        return _interrupted(stopped[0], directory, options, getattr(exc, "signum", None))
    except BaseException:  # any other end before writing (the target down): no empty folder
        release(fresh)
        raise
    return _report(result, directory, options)


def _report(result: CapacityResult, directory: Path, options: CapacityOptions) -> int:
    """Write and print the result; the exit code it calls for."""
    written = write_capacity_json(directory, result)
    print(json.dumps(result.to_dict(), indent=2) if options.json else capacity_table(result))
    print(f"wrote {written}", file=sys.stderr)
    if options.plots is not False:
        try:
            points = [HeadroomPoint(t.index, t.load, t.headroom, t.verdict) for t in result.trials]
            state = str(result.state) if result.state is not None else None
            answer = PlotAnswer(state, result.lower_bound, result.upper_bound)
            path = write_headroom_plot(directory / "capacity.png", points, answer, result.load_kind)
            print(f"wrote {path}", file=sys.stderr)
        except RuntimeError as exc:  # the plots extra is not installed
            print(f"no plot: {exc}", file=sys.stderr)
    failure = result.target_failure()
    if failure is not None:
        error("capacity", failure)
    target_failed = failure is not None
    shaky = result.unreliable_timings()  # an end's timings distrusted by the client: bench fails those
    if shaky is not None:
        error("capacity", shaky)
    unreliable = shaky is not None or result.unmeasured_stop() is not None  # or a shard's, a trial's
    unmeasured = result.state is None  # no trial could be judged: nothing was found
    return EXIT_FAILED if target_failed or unreliable or unmeasured else EXIT_MEASURED


def _interrupted(
    result: CapacityResult, directory: Path, options: CapacityOptions, signum: int | None
) -> int:
    """A search stopped by Ctrl-C (``signum`` None) or a signal: its finished trials written and
    printed as any result (state ``interrupted``), and the exit code of the interruption."""
    _report(result, directory, options)
    name = signal.Signals(signum).name if signum is not None else "Ctrl-C"
    trials = len(result.trials)
    print(
        f"fluidity-exporter capacity: {name}: interrupted after {trials} trial{'' if trials == 1 else 's'}; "
        "what they measured is written (state interrupted)",
        file=sys.stderr,
    )
    return 128 + signum if signum is not None else EXIT_INTERRUPTED


async def _search(
    options: CapacityOptions,
    slo: TrialSlo,
    url: str,
    simulated: bool,
    on_interrupt: Callable[[CapacityResult], None],
) -> CapacityResult:
    settings, facts = await discover_target(options.target, url, simulated)  # calibrated prompts, context
    for line in facts.describe(context_fit_note(options.workload)):
        print(line, file=sys.stderr)
    workload = build_workload(options.workload, settings.api, simulated, facts, options.target.sim_preset)
    printer = ProgressPrinter() if not options.json else (lambda fraction, message: None)
    search = LocalSearch(options.params, slo, settings, workload, facts.context, options.cost)
    return await search_capacity(search, printer, on_interrupt)


CAPACITY_COMMAND = Command("search the highest load that meets a fluidity SLO", add_arguments, run)
