"""``fluidity-exporter bench``: a one-shot black-box evaluation of an endpoint, as Etalon does it.

Sends a workload (a named preset or a trace) to ``--url`` (by default to the built-in simulator,
started in a child process so it has its own core), open-loop at ``--rate`` or closed-loop at
``--concurrency``, for ``--requests`` or ``--duration``; shows live TTFT/TBT/fluidity while it runs;
then prints the summary tables and writes the output directory (``requests.jsonl``, ``summary.json``,
``requests.csv`` and ``tbt.csv`` keyed by request id, and plots with the ``plots`` extra). ``--json``
prints the summary for scripts.
The load plan is built by ``exporter.load.load_plan``, sent by ``exporter.load.plan_runner`` and
reported by ``exporter.report.bench_report``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

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
from exporter.cli.progress import LiveLine
from exporter.evaluation import EvaluationSpec
from exporter.load.load_plan import load_plan
from exporter.load.plan import LoadPlan
from exporter.load.plan_runner import send_plan
from exporter.load.runner import LoadRun, RunHooks
from exporter.load.sessions import session_turns
from exporter.load.target_facts import ContextFit, TargetFacts, discover_target
from exporter.load.workload_options import build_workload, context_fit_note, served_context
from exporter.probe import loop as event_loop
from exporter.report.bench_report import OutputError, bench_report, check_output_path, release, timestamped
from exporter.report.evaluation_options import evaluation_spec
from exporter.report.table import render_summary
from exporter.settings.arrival import ARRIVAL_KINDS
from exporter.settings.bench_options import BenchOptions, read_bench_options
from exporter.settings.load_flags import DEFAULT_RATE, DEFAULT_REQUESTS
from exporter.settings.problems import SettingsError
from exporter.settings.target import TargetSettings
from exporter.settings.think_time import DEFAULT_THINK_TIME
from exporter.settings.trace_files import TRACE_FORMATS
from exporter.sim.process import SimStartError, url_or_simulator
from exporter.stats.objectives import DECODE_TIERS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``bench``; every one can also be a key of the ``--config`` YAML file (flags win)."""
    add_target_arguments(parser)
    load = parser.add_argument_group("load")
    add_workload_arguments(load)
    load.add_argument("--trace", help="a trace file to replay (lengths and, with --arrival trace, times)")
    load.add_argument("--trace-format", help=f"format of --trace: {', '.join(TRACE_FORMATS)}")
    _add_session_arguments(load)
    _add_schedule_arguments(load)
    _add_evaluation_arguments(parser.add_argument_group("evaluation"))
    output = parser.add_argument_group("output")
    output.add_argument("--output", help="directory for the report files (default bench-results/<time>)")
    output.add_argument("--force", action="store_true", default=None, help="replace an earlier result")
    output.add_argument(
        "--plots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also write PNG plots (plots extra)",
    )
    output.add_argument("--json", action="store_true", default=None, help="print summary.json to stdout")
    output.add_argument("--quiet", action="store_true", default=None, help="no progress line")
    add_config_argument(parser, " (e.g. rate: 5)")


def _add_session_arguments(load: argparse._ArgumentGroup) -> None:
    """Multi-turn sessions, tool calls and structured output."""
    load.add_argument(
        "--turns",
        help="turns per session: N, a distribution (uniform:low=2,high=6) or trace (with --trace: a "
        "conversation trace's own turns); default 1, the mooncake preset 1-5",
    )
    load.add_argument(
        "--think-time", help=f"seconds between turns, e.g. fixed:2 (default {DEFAULT_THINK_TIME})"
    )
    load.add_argument(
        "--tool-calls", action="store_true", default=None, help="ask for tool calls instead of text"
    )
    load.add_argument("--response-format", metavar="JSON", help="structured output: a response_format object")


def _add_schedule_arguments(load: argparse._ArgumentGroup) -> None:
    """When requests are sent, how many, and from how many processes."""
    load.add_argument(
        "--rate",
        type=float,
        help=f"requests (with --turns: sessions) per second, open loop (default {DEFAULT_RATE:g})",
    )
    load.add_argument(
        "--arrival", help=f"arrival process: {', '.join(ARRIVAL_KINDS)}, trace (default poisson)"
    )
    load.add_argument(
        "--burstiness", type=float, help="with --arrival gamma: its shape (1 = Poisson; < 1 burstier)"
    )
    load.add_argument("--concurrency", type=int, help="closed loop: requests in flight")
    load.add_argument("--requests", type=int, help=f"number of requests (default {DEFAULT_REQUESTS})")
    load.add_argument(
        "--duration",
        type=float,
        help="seconds of load: no request sent after it (with --requests: whichever ends first)",
    )
    load.add_argument(
        "--workers", type=int, help="client processes for heavy open loads, at most the CPUs (default 1)"
    )
    load.add_argument(
        "--from-scheduled", action="store_true", default=None, help="latency from scheduled send"
    )
    load.add_argument(
        "--seed",
        type=int,
        help="random seed of lengths and arrivals (default 0; prompt texts are new every run)",
    )


def _add_evaluation_arguments(evaluation: argparse._ArgumentGroup) -> None:
    """Deadlines, the fluid rate's percentile, SLOs and goodput bounds."""
    add_prefill_arguments(evaluation)
    evaluation.add_argument(
        "--decode-tiers",
        help=f"name=seconds,... (default {','.join(f'{n}={s:g}' for n, s in DECODE_TIERS.items())})",
    )
    evaluation.add_argument(
        "--percentile", type=float, help="share of requests for the fluid rate, in %% (99)"
    )
    evaluation.add_argument(
        "--objective", action="append", help="an SLO, e.g. ttft:p99<=2 or fluidity:p99>=0.9 (repeatable)"
    )
    evaluation.add_argument(
        "--fluid-percentile", dest="percentile", type=float, action=DeprecatedAlias, use="--percentile"
    )
    evaluation.add_argument(
        "--slo", dest="objective", action=DeprecatedAlias, use="--objective", kind="append"
    )
    evaluation.add_argument("--goodput", help="per-request bounds, e.g. ttft<=2,tpot<=0.1,min_fluidity>=0.9")


def run(args: argparse.Namespace) -> int:
    """The bench command: exit 0 when the measurement is reliable, 1 when the target failed or the
    measurement is not reliable (a health check failed: ``summary.json``'s ``failed_checks``), 2 on bad
    input (usage or config)."""
    fresh: Path | None = None
    try:
        options = read_bench_options(merged_options(args))
        spec = evaluation_spec(options.evaluation)
        directory = Path(options.output) if options.output else timestamped("bench-results")
        fresh = None if options.output else directory  # ours to remove if nothing is written
        check_output_path(directory / "summary.json", options.force)
        with url_or_simulator(options.target.url, options.target.sim_preset) as (url, simulated):
            facts, load, fit = _measure(options, spec, url, simulated)
    except (SettingsError, OutputError, SimStartError) as exc:
        release(fresh)
        error("bench", exc)
        return EXIT_USAGE
    except BaseException:  # any other end before writing (Ctrl-C, the target down): no empty folder
        release(fresh)
        raise
    return _report(load, spec, options, _target(facts, fit), directory)


def _measure(
    options: BenchOptions, spec: EvaluationSpec, url: str, simulated: bool
) -> tuple[TargetFacts, LoadRun, ContextFit | None]:
    """Ask the target about itself, plan the load, send it with live progress."""
    settings, facts = event_loop.run(discover_target(options.target, url, simulated))
    plan = _plan(options, settings, simulated, facts)
    workers = options.workers
    if workers > 1 and isinstance(plan.specs, list) and any(spec.followups for spec in plan.specs):
        # A worker process sends single requests: a session's turns need the answers in one place.
        raise SettingsError("--workers: multi-turn sessions (--turns) run in one process; drop --workers")
    quiet = options.quiet or options.json
    if not quiet:
        target = f"target {url}{' (built-in simulator)' if simulated else ''}; {plan.description}"
        print(target, *facts.describe(context_fit_note(options.workload)), sep="\n", file=sys.stderr)
    live = LiveLine(_total(plan), spec, not quiet)
    load = event_loop.run(_send_until_interrupted(settings, plan, workers, live))
    live.close()
    return facts, load, plan.fit


def _plan(options: BenchOptions, settings: TargetSettings, simulated: bool, facts: TargetFacts) -> LoadPlan:
    """The load plan of the flags, its workload fitted to the context the target serves."""
    sim_preset = options.target.sim_preset
    workload = build_workload(options.workload, settings.api, simulated, facts, sim_preset)
    return load_plan(options.load, workload, served_context(simulated, facts, sim_preset))


def _target(facts: TargetFacts, fit: ContextFit | None) -> dict[str, Any]:
    """What the target said about itself, and what fitting the workload to its context left out
    (``context_fit``; the line before the load promised the result would say it)."""
    said: dict[str, Any] = facts.to_dict()
    said["context_fit"] = None if fit is None else {**fit.to_dict(), "said": fit.describe()}
    return said


async def _send_until_interrupted(
    settings: TargetSettings, plan: LoadPlan, workers: int, live: LiveLine
) -> LoadRun:
    """``send_plan``, where a first Ctrl-C stops sending and lets the requests in flight end, so the
    report covers what was sent (the run says it was interrupted); a second one aborts at once."""
    loop, stop = asyncio.get_running_loop(), asyncio.Event()

    def interrupted() -> None:
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)  # the next Ctrl-C raises KeyboardInterrupt
        _warn("interrupted: the requests in flight end, then the report is written (Ctrl-C again to abort)")

    if workers <= 1:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers here
            loop.add_signal_handler(signal.SIGINT, interrupted)
    try:
        return await send_plan(settings, plan, workers, RunHooks(on_result=live, stop=stop), _warn)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def _total(plan: LoadPlan) -> int | None:
    """Requests the plan sends in all, when known up front (a count, not a duration)."""
    return session_turns(plan.specs) if isinstance(plan.specs, list) and plan.duration is None else None


def _warn(problem: str) -> None:
    print(f"fluidity-exporter bench: {problem}", file=sys.stderr)


def _report(
    load: LoadRun, spec: EvaluationSpec, options: BenchOptions, target: dict[str, Any], directory: Path
) -> int:
    """Compute the summary, write the files to ``directory``, print the tables (or the JSON)."""
    report = bench_report(load, spec, directory, target, bool(options.plots))
    if report.no_plots is not None:
        _warn(report.no_plots)
    if options.json:
        print(json.dumps(report.summary, indent=2))
        print(f"wrote {len(report.written)} files to {directory}", file=sys.stderr)
    else:
        print(render_summary(report.summary))
        if target["context_fit"] is not None:
            print(f"\n{target['context_fit']['said']}")
        print(f"\nwrote {len(report.written)} files to {directory}")
    if load.stopped_by == "interrupted":
        _warn(f"interrupted: the report covers the {len(load.results)} requests sent before Ctrl-C")
        return EXIT_INTERRUPTED
    return EXIT_MEASURED if report.summary["reliable"] else EXIT_FAILED


BENCH_COMMAND = Command("run a one-shot evaluation of an endpoint and write a report", add_arguments, run)
