"""Sending a one-shot run's load plan: in this process, or dealt over local worker processes (shards).

``worker_pool`` starts the ``--workers`` shard processes (none for one worker: this process sends);
``send_plan`` sends a ``LoadPlan`` either way and hands every result to the hooks' ``on_result`` as it comes,
so a progress display sees the load live.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from exporter.load.plan import LoadPlan
from exporter.load.runner import LoadRun, RunHooks, load_run_from_results, run_plan
from exporter.load.shards.local import local_shards
from exporter.load.shards.pool import ShardPool
from exporter.load.shards.runs import ShardHooks
from exporter.load.shards.tasks import plan_specs
from exporter.probe.client import ProbeClient
from exporter.settings.problems import SettingsError
from exporter.settings.shards import PoolSettings
from exporter.settings.target import TargetSettings


@contextlib.asynccontextmanager
async def worker_pool(
    workers: int | None, settings: TargetSettings, pool_settings: PoolSettings | None = None
) -> AsyncIterator[ShardPool | None]:
    """``workers`` local shard processes, or None for one (this process sends)."""
    if not workers or workers <= 1:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        try:
            pool = await stack.enter_async_context(local_shards(workers, settings.api_key, pool_settings))
        except TimeoutError as exc:  # a worker that never started
            raise SettingsError(f"--workers: {exc}") from exc
        yield pool


async def send_plan(
    settings: TargetSettings, plan: LoadPlan, workers: int, hooks: RunHooks, warn: Callable[[str], None]
) -> LoadRun:
    """Send the plan in this process or over worker processes (shards); ``warn`` hears what made a
    sharded load other than planned. ``hooks.stop``, once set, ends the sending in this process (the
    run is ``interrupted``); worker processes are not told."""
    if workers > 1 and isinstance(plan.specs, list):
        return await _send_sharded(settings, plan, workers, hooks, warn)
    async with ProbeClient(settings) as client:
        await client.resolve_model()
        return await run_plan(lambda spec, at: client.send(spec, scheduled_at=at), plan, hooks)


async def _send_sharded(
    settings: TargetSettings, plan: LoadPlan, workers: int, hooks: RunHooks, warn: Callable[[str], None]
) -> LoadRun:
    """The plan dealt over ``workers`` shard processes (open loop by due time, or the concurrency
    split), the results merged in plan order."""
    on_result = hooks.on_result
    async with worker_pool(workers, settings) as pool:
        assert pool is not None  # more than one worker
        heard = None if on_result is None else ShardHooks(on_result=lambda _index, result: on_result(result))
        report = await pool.run_plan(settings, plan, heard or ShardHooks())
    for problem in report.problems:
        warn(problem)
    specs = plan_specs(plan)
    sent = [i for i in sorted(report.results) if i not in report.cancelled]
    return load_run_from_results(report.in_order(), [specs[i] for i in sent], plan)
