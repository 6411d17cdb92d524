"""``fluidity-exporter profile``: profile the prefill time of an endpoint and write the deadline model.

Against ``--url`` (by default the built-in simulator in a child process), sends isolated one-token
requests across a geometric ladder of prompt lengths, prints the minimum TTFT per length beside the
fitted curve, and writes the model as JSON: ``bench --prefill-model FILE`` and the daemon's
``slos.*.prefill.model_file`` read it to set ``Dp(P)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from exporter.cli import EXIT_FAILED, EXIT_MEASURED, EXIT_USAGE, Command
from exporter.config.job_params import geometric_ladder
from exporter.jobs.capacity_command import worker_pool
from exporter.jobs.manager import JobFailedError
from exporter.jobs.prefill_profile import LengthSample, PrefillProfile, profile_prefill
from exporter.jobs.runners import PROFILE_POOL, one_at_a_time
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.oneshot import (
    CONTEXT_MARGIN,
    BenchError,
    TargetFacts,
    add_target_arguments,
    discover,
    merged_options,
    refuse_overwrite,
    skip_calibration,
    target_settings,
    target_url,
)
from exporter.probe import loop as event_loop
from exporter.probe.client import ProbeClient
from exporter.stats.prefill import dump_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``profile``."""
    add_target_arguments(parser)
    parser.add_argument(
        "--lengths", help="prompt lengths, e.g. 128,512,2048 (default 128 to 16384, doubling)"
    )
    parser.add_argument("--max-length", type=int, help="top of the default ladder (default 16384)")
    parser.add_argument("--repeats", type=int, default=3, help="requests per length; the minimum counts (3)")
    parser.add_argument(
        "--workers", type=int, help="client processes taking turns (requests stay one at a time; default 1)"
    )
    parser.add_argument("--output", default="prefill-model.json", help="where to write the model")
    parser.add_argument("--force", action="store_true", default=None, help="replace an existing --output")
    parser.add_argument("--json", action="store_true", default=None, help="print model and samples as JSON")
    parser.add_argument("--config", help="YAML file whose keys are these flags' names")


def lengths(options: dict[str, Any]) -> tuple[int, ...]:
    if options["lengths"]:
        try:
            values = tuple(int(part) for part in str(options["lengths"]).split(","))
        except ValueError:
            raise BenchError(
                f'--lengths "{options["lengths"]}": expected integers, e.g. 128,512,2048'
            ) from None
        if not values or min(values) < 1:
            raise BenchError("--lengths: every length must be >= 1 token")
        return values
    try:
        return geometric_ladder(high=options["max_length"] or 16384)
    except ValueError as exc:
        raise BenchError(f"--max-length: {exc}") from exc


def fit_ladder(ladder: tuple[int, ...], facts: TargetFacts, exact: bool) -> tuple[int, ...]:
    """The lengths that fit the target's context with their one output token (a default ladder to
    16384 sent two requests the default 8192-token simulator must refuse); the top becomes the longest
    prompt that fits. Calibrated prompts keep a margin for their residual error."""
    if facts.context is None:
        return ladder
    room = facts.context - 1 if exact else int(facts.context * (1 - CONTEXT_MARGIN)) - 1
    kept = tuple(length for length in ladder if length <= room)
    if len(kept) < len(ladder):
        left_out = ", ".join(str(length) for length in ladder if length > room)
        print(
            f"prompt lengths {left_out} left out: the server's context is {facts.context} tokens",
            file=sys.stderr,
        )
        if room not in kept and room > (kept[-1] if kept else 0):
            kept = (*kept, room)
    return kept


async def _profile(options: dict[str, Any], url: str, simulated: bool) -> PrefillProfile:
    settings = target_settings(options, url)
    facts = await discover(settings, skip_calibration(options, simulated))
    for line in facts.describe():
        print(line, file=sys.stderr)
    builder: PromptBuilder = SimPromptBuilder() if simulated else ApproxPromptBuilder()
    if facts.calibration is not None:
        builder = facts.calibration.builder
    ladder = fit_ladder(lengths(options), facts, exact=simulated)
    workers = worker_pool(options["workers"], settings, PROFILE_POOL)
    async with ProbeClient(settings) as client, workers as pool:
        await client.resolve_model()
        send = client.send if pool is None else one_at_a_time(pool, settings)
        return await profile_prefill(
            send, builder, settings.api, ladder, options["repeats"], _progress(options)
        )


def _progress(options: dict[str, Any]) -> Any:
    def show(sample: LengthSample) -> None:
        if not options["json"]:
            best = f"{sample.best:.4f} s" if sample.best is not None else "no answer"
            print(f"  {sample.prompt_tokens:>7} tokens: min TTFT {best}", file=sys.stderr)

    return show


def report(profile: PrefillProfile) -> str:
    lines = [f"{'prompt tokens':>14}{'min TTFT (s)':>14}{'fitted (s)':>12}  outcomes"]
    for sample in profile.samples:
        best = f"{sample.best:.4f}" if sample.best is not None else "-"
        fitted = f"{profile.model.predict(float(sample.length)):.4f}" if profile.model else "-"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(sample.outcomes.items()))
        lines.append(f"{sample.length:>14}{best:>14}{fitted:>12}  {outcomes}")
    if profile.model is not None:
        a, b, c = profile.model.coefficients
        lines.append(f"TTFT(P) = {a:.4g} + {b:.4g}*P + {c:.4g}*P^2  (rmse {profile.model.rmse:.4g} s)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Exit 0 with a model written, 1 when no length answered (the target failed), 2 on bad input or
    an existing ``--output`` without ``--force`` (exit codes: ``exporter.cli``)."""
    try:
        options = merged_options(args)
        if options["repeats"] < 1:
            raise BenchError("--repeats must be >= 1")
        if options["workers"] is not None and options["workers"] < 1:
            raise BenchError("--workers must be >= 1")
        lengths(options)
        refuse_overwrite(Path(options["output"]), bool(options["force"]))
        with target_url(options) as (url, simulated):
            profile = event_loop.run(_profile(options, url, simulated))
    except BenchError as exc:
        print(f"fluidity-exporter profile: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except JobFailedError as exc:  # a worker process died or started late: no profile to trust
        print(f"fluidity-exporter profile: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if options["json"]:
        print(json.dumps(profile.to_dict(), indent=2))
    else:
        print(report(profile))
    if profile.model is None:
        print("fluidity-exporter profile: no prompt length got an answer; no model written", file=sys.stderr)
        return EXIT_FAILED
    Path(options["output"]).write_text(dump_json(profile.model) + "\n", encoding="utf-8")
    print(f"wrote {options['output']}", file=sys.stderr if options["json"] else sys.stdout)
    return EXIT_MEASURED


PROFILE_COMMAND = Command("profile prefill time by prompt length and write the Dp model", add_arguments, run)
