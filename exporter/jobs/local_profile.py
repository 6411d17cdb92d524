"""A prefill profile run from this process (the ``profile`` command), without the daemon.

The prompt lengths come from the flags (``--lengths``, or a doubling ladder up to ``--max-length``:
``exporter.settings.profile_options``), fitted to the target's context; the requests go one at a time
from this process, or from local worker processes taking turns.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.jobs.prefill_profile import OnSample, PrefillProfile, ProfileRequests, profile_prefill
from exporter.jobs.profile_runner import PROFILE_POOL, one_at_a_time
from exporter.load.plan_runner import worker_pool
from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings


async def profile_target(
    settings: TargetSettings,
    requests: ProfileRequests,
    workers: int,
    on_sample: OnSample | None = None,
    on_interrupt: Callable[[PrefillProfile], None] | None = None,
) -> PrefillProfile:
    """``requests`` sent from this process or from ``workers`` processes taking turns, and the fitted
    model (``on_interrupt``: what a profile stopped by Ctrl-C or SIGTERM measured)."""
    async with (
        ProbeClient(settings) as client,
        worker_pool(workers, settings, PROFILE_POOL) as pool,
    ):
        await client.resolve_model()
        send = client.send if pool is None else one_at_a_time(pool, settings)
        return await profile_prefill(send, requests, on_sample, on_interrupt)


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
