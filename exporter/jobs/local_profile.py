"""A prefill profile run from this process (the ``profile`` command), without the daemon.

The prompt lengths come from the options (``--lengths``, or a doubling ladder up to ``--max-length``),
fitted to the target's context; the requests go one at a time from this process, or from local worker
processes taking turns.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.jobs.prefill_profile import OnSample, PrefillProfile, profile_prefill
from exporter.jobs.profile_runner import PROFILE_POOL, one_at_a_time
from exporter.load.plan_runner import worker_pool
from exporter.load.target_facts import TargetFacts
from exporter.load.workload_options import prompt_builder
from exporter.probe.client import ProbeClient
from exporter.settings.job_params import DEFAULT_HIGH, distinct_lengths, geometric_ladder
from exporter.settings.oneshot import Options
from exporter.settings.problems import SettingsError
from exporter.settings.target import TargetSettings


def lengths(options: Options) -> tuple[int, ...]:
    """``--lengths``, or the doubling ladder up to ``--max-length``."""
    if options["lengths"]:
        if options["max_length"] is not None:
            raise SettingsError(
                "give either --lengths or --max-length (the top of the default ladder), not both"
            )
        return _given_lengths(str(options["lengths"]))
    try:
        # ``is None``, not ``or``: 0 is a bad value to refuse, not "not given" (it ran the default ladder)
        high = DEFAULT_HIGH if options["max_length"] is None else options["max_length"]
        return geometric_ladder(high=high)
    except ValueError as exc:
        raise SettingsError(f"--max-length: {exc}") from exc


def _given_lengths(text: str) -> tuple[int, ...]:
    """``--lengths``: distinct prompt lengths of at least one token (a length twice would be profiled twice)."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SettingsError(f'--lengths "{text}": expected integers, e.g. 128,512,2048') from None
    if not values or min(values) < 1:
        raise SettingsError("--lengths: every length must be >= 1 token")
    try:
        return distinct_lengths(values)  # the jobs API's rule, and its message
    except ValueError as exc:
        raise SettingsError(f"--lengths: {exc}") from None


async def profile_target(
    settings: TargetSettings,
    ladder: tuple[int, ...],
    options: Options,
    facts: TargetFacts,
    simulated: bool,
    on_sample: OnSample | None = None,
    on_interrupt: Callable[[PrefillProfile], None] | None = None,
) -> PrefillProfile:
    """``--repeats`` isolated one-token requests per length of ``ladder``, and the fitted model
    (``on_interrupt``: what a profile stopped by Ctrl-C or SIGTERM measured)."""
    builder = prompt_builder(facts, simulated)
    async with (
        ProbeClient(settings) as client,
        worker_pool(options["workers"], settings, PROFILE_POOL) as pool,
    ):
        await client.resolve_model()
        send = client.send if pool is None else one_at_a_time(pool, settings)
        return await profile_prefill(
            send, builder, settings.api, ladder, options["repeats"], on_sample, on_interrupt
        )


def profile_table(profile: PrefillProfile) -> str:
    """Minimum TTFT per length beside the fitted curve, and the model's formula."""
    lines = [f"{'prompt tokens':>14}{'min TTFT (s)':>14}{'fitted (s)':>12}  outcomes"]
    for sample in profile.samples:
        best = f"{sample.best:.4f}" if sample.best is not None else "-"
        fitted = f"{profile.model.predict(float(sample.length)):.4f}" if profile.model else "-"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(sample.outcomes.items()))
        lines.append(f"{sample.length:>14}{best:>14}{fitted:>12}  {outcomes}")
    if profile.model is not None:
        lines.append(profile.model.formula())
    return "\n".join(lines)
