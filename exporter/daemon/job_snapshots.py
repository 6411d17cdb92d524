"""Finished jobs as the collector shows them: the latest capacity search per (target, module), the
stored prefill profiles and the job counts, built from the job store's records (pure functions)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from exporter.exposition.job_gauges import (
    CapacitySnapshot,
    CostPoint,
    JobCounts,
    JobsSnapshot,
    ProfileSnapshot,
    TrialPoint,
)
from exporter.jobs.capacity_result import stop_kind
from exporter.jobs.job_records import JOB_STATES, JobRecord
from exporter.jobs.profiles import StoredProfile
from exporter.settings.job_params import JOB_KINDS
from exporter.settings.model import Target


def jobs_snapshot(
    records: Sequence[JobRecord],
    profiles: Mapping[str, StoredProfile],
    targets: Sequence[Target],
    finished: Mapping[tuple[str, str, str], int],
    contexts: Mapping[str, int | None] | None = None,
    *,
    over_context: tuple[tuple[str, str], ...] = (),
) -> JobsSnapshot:
    """``records`` newest first, as the store lists them; ``finished`` counts ended jobs by (target,
    kind, state), listed with 0 for every configured target from the start;
    ``contexts`` is the context each target said it serves (None: not said); ``over_context`` the
    configured (target, module) pairs none of whose requests fit it.
    Results of targets no longer configured (a reload removed or renamed them) stay in the store and the
    jobs API but leave /metrics, as the target's probe series do: a gauge of a target that is gone
    would keep a dashboard and an alert on it."""
    configured = {target.name for target in targets}
    latest: dict[tuple[str, str], CapacitySnapshot] = {}
    for record in reversed(records):  # oldest first: newer ones overwrite
        snapshot = capacity_snapshot(record)
        if snapshot is not None and snapshot.target in configured:
            latest[(snapshot.target, snapshot.module)] = snapshot
    stored = tuple(
        ProfileSnapshot(name, p.model, p.measured_at) for name, p in profiles.items() if name in configured
    )
    # Every (target, kind) from the start, with 0: a gauge that vanishes at 0 reads "no data".
    running: Counter[tuple[str, str]] = Counter({(t.name, kind): 0 for t in targets for kind in JOB_KINDS})
    terminal = [state for state in JOB_STATES if state != "running"]
    ended: Counter[tuple[str, str, str]] = Counter(
        {(t.name, kind, state): 0 for t in targets for kind in JOB_KINDS for state in terminal}
    )
    ended.update(finished)  # a target a reload removed keeps its counts: a counter does not go back
    running.update((r.target, r.kind) for r in records if r.state == "running")
    gpus = {target.name: target.gpus for target in targets if target.gpus is not None}
    served = {t: n for t, n in (contexts or {}).items() if n is not None and t in configured}
    return JobsSnapshot(
        tuple(latest.values()), stored, JobCounts(dict(ended), dict(running)), gpus, served, over_context
    )


def capacity_snapshot(record: JobRecord) -> CapacitySnapshot | None:
    """A finished capacity search as the collector shows it (None for any other job)."""
    result = record.result
    if record.kind != "capacity" or record.state != "succeeded" or result is None:
        return None
    trials = tuple(
        TrialPoint(int(t["index"]), float(t["load"]), bool(t["passed"]), t.get("headroom"))
        for t in result.get("trials", [])
    )
    # A result stored before states existed said "capacity" for its highest pass, bound or not.
    lower = result.get("lower_bound", result.get("capacity"))
    state = result.get("state") or (
        "found" if result.get("converged") else "not_met" if lower is None else "lower_bound"
    )
    costs = {at: _cost_point(point) for at, point in (result.get("costs") or {}).items()}
    return CapacitySnapshot(
        target=record.target,
        module=str(result.get("module") or record.module or ""),
        load_kind=str(result["load_kind"]),
        capacity=lower if state == "found" else None,
        fluid_token_rate=result.get("fluid_token_rate_at_capacity"),
        goodput_ratio=result.get("goodput_ratio_at_capacity"),
        goodput_rate=result.get("goodput_rate_at_capacity"),
        finished_at=record.finished_at or record.created_at,
        trials=trials,
        state=str(state),
        lower_bound=lower,
        upper_bound=result.get("upper_bound"),
        costs=costs,
        unreliable_timings=result.get("unreliable_timings") is not None,
        stopped_by=stop_kind(str(result.get("stopped_by") or "")),
        predicted=_predicted(result.get("prediction")),
        prediction_error=_number((result.get("prediction") or {}).get("error")),
    )


def _predicted(prediction: Any) -> dict[str, float]:
    """The stored prediction's estimate and interval (``capacity_model.prediction_report``)."""
    if not isinstance(prediction, dict):
        return {}
    bounds = {
        "estimate": prediction.get("load"),
        "low": prediction.get("low"),
        "high": prediction.get("high"),
    }
    return {name: number for name, value in bounds.items() if (number := _number(value)) is not None}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _cost_point(point: dict[str, Any]) -> CostPoint:
    """A stored cost figure as exported: the token cost in base units (per token, not per million)."""
    per_million = point.get("cost_per_million_fluid_tokens")
    return CostPoint(
        point.get("fluid_goodput_tokens_per_s"),
        point.get("fluid_tokens_per_gpu_second"),
        None if per_million is None else per_million / 1e6,
    )
