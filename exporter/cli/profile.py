"""``fluidity-exporter profile``: profile the prefill time of an endpoint and write the deadline model.

Against ``--url`` (by default the built-in simulator in a child process), sends isolated one-token
requests across a geometric ladder of prompt lengths (``exporter.jobs.local_profile``), prints the
minimum TTFT per length beside the fitted curve, and writes the model as JSON: ``bench --prefill-model
FILE`` and the daemon's ``slos.*.prefill.model_file`` read it to set ``Dp(P)``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from exporter.cli.command import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MEASURED, EXIT_USAGE, Command
from exporter.cli.flags import add_config_argument, add_target_arguments, error, merged_options
from exporter.jobs.local_profile import profile_table, profile_target
from exporter.jobs.manager import JobFailedError
from exporter.jobs.prefill_profile import (
    LengthSample,
    OnSample,
    PrefillProfile,
    ProfileRequests,
    constant_note,
    fit_ladder,
    left_out_note,
)
from exporter.load.target_facts import discover_target
from exporter.load.workload_options import prompt_builder
from exporter.probe import loop as event_loop
from exporter.report.bench_report import OutputError, check_output_path
from exporter.settings.job_params import DEFAULT_HIGH, DEFAULT_LOW, ProfileParams
from exporter.settings.problems import SettingsError
from exporter.settings.profile_options import DEFAULT_OUTPUT, ProfileOptions, read_profile_options
from exporter.sim.process import SimStartError, url_or_simulator
from exporter.stats.prefill import dump_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``profile``."""
    add_target_arguments(parser)
    parser.add_argument(
        "--lengths",
        help=f"distinct prompt lengths, e.g. 128,512,2048 (default {DEFAULT_LOW} to {DEFAULT_HIGH}, doubling)",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        help=f"top of the default ladder, without --lengths (default {DEFAULT_HIGH})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"requests per length; the minimum counts ({ProfileParams.repeats})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="client processes taking turns, at most the CPUs (requests stay one at a time; default 1)",
    )
    parser.add_argument("--output", help=f"where to write the model (default {DEFAULT_OUTPUT})")
    parser.add_argument("--force", action="store_true", default=None, help="replace an existing --output")
    parser.add_argument("--json", action="store_true", default=None, help="print model and samples as JSON")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Exit 0 with a model written, 1 when no length answered (the target failed), 2 on bad input or
    an existing ``--output`` without ``--force`` (exit codes: ``exporter.cli``)."""
    stopped: list[PrefillProfile] = []  # what a profile stopped by Ctrl-C or SIGTERM measured
    try:
        options = read_profile_options(merged_options(args))
        # Bad input fails before the simulator starts or any request is sent.
        check_output_path(Path(options.output), options.force, new_folders=False)
        with url_or_simulator(options.target.url, options.target.sim_preset) as (url, simulated):
            profile = event_loop.run(_profile(options, url, simulated, stopped.append))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM and SIGHUP (``exporter.cli.Terminated``)
        if not stopped or not stopped[0].samples:
            raise
        return _interrupted(stopped[0], Path(options.output), getattr(exc, "signum", None))
    except (SettingsError, OutputError, SimStartError) as exc:
        error("profile", exc)
        return EXIT_USAGE
    except JobFailedError as exc:  # a worker process died or started late: no profile to trust
        error("profile", exc)
        return EXIT_FAILED
    print(json.dumps(profile.to_dict(), indent=2) if options.json else profile_table(profile))
    if profile.model is None:
        print("fluidity-exporter profile: no prompt length got an answer; no model written", file=sys.stderr)
        return EXIT_FAILED
    note = constant_note(profile.model)
    if note is not None:
        print(f"fluidity-exporter profile: {note}", file=sys.stderr)
    output = Path(options.output)
    output.write_text(dump_json(profile.model) + "\n", encoding="utf-8")
    print(f"wrote {options.output}", file=sys.stderr if options.json else sys.stdout)
    return EXIT_MEASURED


def interrupted_path(output: Path) -> Path:
    """Where a stopped profile writes what it measured: beside ``--output``, never in its place (a
    fit of part of the ladder is no model to set deadlines by)."""
    return output.with_name(f"{output.stem}.interrupted{output.suffix or '.json'}")


def _interrupted(profile: PrefillProfile, output: Path, signum: int | None) -> int:
    """A profile stopped by Ctrl-C (``signum`` None) or a signal: the lengths it finished, and their
    fit, written beside ``--output`` (state ``interrupted``); the exit code of the interruption."""
    path = interrupted_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.to_dict(), indent=2) + "\n", encoding="utf-8")
    name = signal.Signals(signum).name if signum is not None else "Ctrl-C"
    done = len(profile.samples)
    print(
        f"fluidity-exporter profile: {name}: interrupted after {done} length{'' if done == 1 else 's'}; "
        f"wrote what they measured to {path} (state interrupted), no model to {output}",
        file=sys.stderr,
    )
    return 128 + signum if signum is not None else EXIT_INTERRUPTED


async def _profile(
    options: ProfileOptions, url: str, simulated: bool, on_interrupt: Callable[[PrefillProfile], None]
) -> PrefillProfile:
    settings, facts = await discover_target(options.target, url, simulated)
    ladder, left_out = fit_ladder(options.lengths, facts.context, exact=simulated)
    for line in facts.describe(f"prompt lengths {', '.join(map(str, ladder))} fit in it"):
        print(line, file=sys.stderr)
    if left_out:
        print(left_out_note(left_out, facts.context), file=sys.stderr)
    requests = ProfileRequests(prompt_builder(facts, simulated), settings.api, ladder, options.repeats)
    return await profile_target(settings, requests, options.workers, _progress(options), on_interrupt)


def _progress(options: ProfileOptions) -> OnSample | None:
    if options.json:
        return None

    def show(sample: LengthSample) -> None:
        best = f"{sample.best:.4f} s" if sample.best is not None else "no answer"
        print(f"  {sample.prompt_tokens:>7} tokens: min TTFT {best}", file=sys.stderr)

    return show


PROFILE_COMMAND = Command("profile prefill time by prompt length and write the Dp model", add_arguments, run)
