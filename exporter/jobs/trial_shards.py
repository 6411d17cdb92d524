"""A capacity trial sharded over K client processes or pods, judged exactly as one process would be.

The trial's plan (the same specs and arrival offsets as in process) is dealt over the shards of a
``ShardPool`` (``exporter.load.shard_pool``). Shards stream every request's start, first token and
result back as they happen, so the same tally as in process (``trial.Tally``) sees them: requests
certain to fail, waits past their give-up point, the early-stop decision; and the job's progress
counts each result as it comes, as in process. When the verdict is decided
the pool tells the shards to stop; the requests they cancel come back with the tokens received so far,
which the trial's token count includes. The verdict is ``trial_verdict.judge`` over the merged results in plan
order: a sharded trial and an in-process one of the same plan differ only in the timings the target
gave them.

One thing more: a shard late to start, dead, or saturated makes the merged load something other than
the plan, so such a trial does not pass: its reason is ``"shards"`` and its figures say which shard and
why (the search stops there rather than read a broken load as the target's failure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from exporter.jobs.trial import Tally, TrialPlan, TrialReport, watch
from exporter.jobs.trial_verdict import SHARDS_REASON, TrialSlo, Verdict, judge
from exporter.load.shard_pool import ShardPool
from exporter.load.shard_report import ShardRunReport
from exporter.load.shard_run import ShardHooks
from exporter.settings.target import TargetSettings
from exporter.streams.result import ProbeResult


async def run_sharded_trial(
    index: int,
    plan: TrialPlan,
    slo: TrialSlo,
    pool: ShardPool,
    settings: TargetSettings,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> TrialReport:
    """Send ``plan`` over ``pool``'s shards and judge the merged results (``on_result``: each result
    as a shard's post brings it, for progress, as ``run_trial`` gives it)."""
    tally = Tally(plan, slo)

    def started(position: int, result: ProbeResult) -> None:
        result.extra["measured"] = position >= plan.warmup
        tally.started.append(result)

    def ended(_position: int, result: ProbeResult) -> None:
        tally.on_result(result)
        if on_result is not None:
            on_result(result)

    stop = asyncio.Event()
    began = time.perf_counter()
    watcher = asyncio.ensure_future(watch(tally)) if plan.early_stop else None
    run = asyncio.ensure_future(pool.run_plan(settings, plan.load_plan(), ShardHooks(started, ended, stop)))
    try:
        stopped_by = await _until_done_or_decided(run, tally, stop, plan.time_limit_s)
        report = run.result()
    finally:
        if watcher is not None:
            watcher.cancel()
    now = time.perf_counter()
    closed = plan.concurrency is not None
    if stopped_by is not None:  # judged on what came back, the requests cut short as given up
        verdict = judge(list(tally.measured), slo, tally.given_up(now), closed_loop=closed, sent=tally.sent())
    else:
        verdict = judge([r for r in report.in_order() if r.extra.get("measured")], slo, closed_loop=closed)
    # The shards' stamps come back on this process's clock (``shard_protocol``'s origin), so which
    # requests had nothing else in flight is read across shards as in process.
    tally.note_alone(verdict.figures, now)
    trial = TrialReport.of(
        index, plan.load, with_shards(verdict, report), len(tally.started), now - began, tally.tokens(),
        stopped_by == "early_stop",
    )  # fmt: skip
    trial.planned, trial.ended_by = plan.measured, _ended_by(stopped_by, tally, report)
    return trial


def _ended_by(stopped_by: str | None, tally: Tally, report: ShardRunReport) -> str:
    """How the merged trial's sends ended, as ``run_trial`` says it of one process: the tally's stop
    (a confident failure, or a pass it could no longer settle) or the time limit, else ``duration``
    when it cut any shard's sends (the merged run then sent fewer requests than planned), else
    ``requests``."""
    if stopped_by == "early_stop":
        return tally.reason or stopped_by
    if stopped_by is not None:
        return stopped_by
    return "duration" if report.cut_by_duration else "requests"


async def _until_done_or_decided(
    run: asyncio.Future[ShardRunReport], tally: Tally, stop: asyncio.Event, limit_s: float | None
) -> str | None:
    """Wait for the run; once the verdict is decided or the trial's time limit is reached, stop the
    shards and wait for their last results (their requests in flight come back cancelled). Says which
    ended it early ("early_stop", "time_limit"), or None when the run ended by itself."""
    decided: asyncio.Future[Any] = asyncio.ensure_future(tally.decided.wait())
    try:
        await asyncio.wait({run, decided}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            return None
        stop.set()
        await asyncio.wait({run})
        return "early_stop" if decided.done() else "time_limit"
    except asyncio.CancelledError:
        run.cancel()  # the job was cancelled: the pool calls the run off, the shards hear "stop"
        await asyncio.gather(run, return_exceptions=True)
        raise
    finally:
        decided.cancel()


def with_shards(verdict: Verdict, report: ShardRunReport) -> Verdict:
    """The verdict with the shards' figures; not a pass when a shard made the load other than planned."""
    figures = {**verdict.figures, "shards": report.to_dict()}
    if report.problems:
        return Verdict(False, SHARDS_REASON, verdict.headroom, figures)
    return Verdict(verdict.passed, verdict.reason, verdict.headroom, figures)
