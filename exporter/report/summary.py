"""From measured probe results to the figures of a report: pure functions, no I/O.

``exporter.evaluation.measure`` turns the completed requests into arrays; ``summarize`` computes every
figure of ``summary.json`` from them; ``request_record`` gives one line of ``requests.jsonl``. Only
completed streams (``ok``, and ``truncated`` ones that did stream tokens) enter the latency and fluidity
figures; every request, failed or not, counts in the outcomes and in goodput's total.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, cast

import numpy as np

from exporter.evaluation import (
    COMPLETED,
    DeadlinePolicy,
    EvaluationSpec,
    Measured,
    e2e_seconds,
    measure,
    metric_values,
    slo_tier,
)
from exporter.stats.batch import FloatArray
from exporter.stats.distribution import describe, percentile
from exporter.stats.fluidity import fluid_token_rate
from exporter.stats.objectives import Goodput, SloMetric, evaluate_objectives, goodput, with_failed
from exporter.streams.result import ProbeResult, intervals, ttft


def summarize(
    results: Sequence[ProbeResult],
    measured: Measured,
    spec: EvaluationSpec,
    duration_s: float,
    health_checks: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Every figure of ``summary.json`` (plain JSON-ready data; NaN becomes None).

    ``measured`` is ``measure(results, spec)``, passed in because the report files need it too.
    """
    summary: dict[str, Any] = {
        "requests": _request_counts(results, measured),
        "duration_s": duration_s,
        "throughput": _throughput(measured, duration_s),
        "latency": _latency(measured),
        "fluidity": _fluidity(measured, spec.deadlines),
        "rates": _rates(measured, spec.deadlines),
        "goodput": _goodput(results, measured, spec, duration_s),
        "slos": _slos(results, measured, spec),
        "turns": turns_summary(results, spec),
        "health_checks": [dict(check) for check in health_checks],
    }
    summary["reliable"], summary["failed_checks"] = reliability(health_checks)
    summary["workload_warnings"] = workload_warnings(health_checks)
    summary["reliability_rule"] = RELIABILITY_RULE
    return cast(dict[str, Any], _json_safe(summary))


RELIABILITY_RULE = (
    "the measurement is reliable when every health check of the load that applies to the run passed "
    "(each has its own threshold, e.g. at most 1% of requests with unreliable timings); one that could "
    "not be judged fails; a workload check (output_tokens) only warns: the timings stand"
)


def reliability(health_checks: Sequence[Mapping[str, Any]]) -> tuple[bool, list[str]]:
    """Whether the measurement is reliable, and the checks that say it is not: ``RELIABILITY_RULE``,
    the one rule the table, the verdict line, ``summary.json`` and the exit code all follow."""
    failed = [
        str(check.get("name", "?"))
        for check in health_checks
        if _decides(check) and check.get("passed") is not True
    ]
    return not failed, failed


def workload_warnings(health_checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The workload checks that failed: the server served another workload than asked, timed right."""
    return [
        str(check.get("name", "?"))
        for check in health_checks
        if check.get("applies", True) and not check.get("required", True) and check.get("passed") is False
    ]


def _decides(check: Mapping[str, Any]) -> bool:
    """Whether a check's verdict is the measurement's: it applies to the run and is not a workload's."""
    return bool(check.get("applies", True) and check.get("required", True))


def _request_counts(results: Sequence[ProbeResult], measured: Measured) -> dict[str, Any]:
    return {
        "total": len(results),
        "completed": len(measured.results),
        "by_outcome": dict(Counter(r.outcome.value for r in results)),
        "first_error": _first_errors(results),
        "http_status": dict(Counter(str(r.http_status) for r in results if (r.http_status or 0) >= 400)),
        "token_sources": dict(Counter(r.token_source.value for r in measured.results)),
        "unreliable": sum(r.unreliable for r in results),
        "retried": sum(r.retries for r in results),
    }


def _first_errors(results: Sequence[ProbeResult]) -> dict[str, str]:
    """The error of the first request of each failed outcome: why they failed, where the counts say
    only how many (the rest are in requests.jsonl)."""
    first: dict[str, str] = {}
    for result in results:
        if result.error is not None and not result.ok:
            first.setdefault(result.outcome.value, result.error)
    return first


def _throughput(measured: Measured, duration_s: float) -> dict[str, float]:
    tokens = float(measured.batch.token_count)
    return {
        "completed_requests_per_s": len(measured.results) / duration_s if duration_s > 0 else math.nan,
        "output_tokens_per_s": tokens / duration_s if duration_s > 0 else math.nan,
    }


def _latency(measured: Measured) -> dict[str, Any]:
    latency = measured.latency
    first_any = [ttft(r, include_reasoning=True) for r in measured.results]
    return {
        "ttft": describe(latency.ttft).to_dict(),
        "ttft_including_reasoning": describe([math.nan if v is None else v for v in first_any]).to_dict(),
        "tbt": describe(latency.tbt).to_dict(),
        "tpot": describe(latency.tpot).to_dict(),
        "e2e": describe(latency.e2e).to_dict(),
        "normalized_latency": describe(latency.normalized_latency).to_dict(),
        "output_tokens_per_s": describe(latency.output_tokens_per_s).to_dict(),
        "longest_gap": describe(latency.max_tbt).to_dict(),
        "output_tokens": describe(latency.tokens.astype(np.float64)).to_dict(),
    }


def _fluidity(measured: Measured, policy: DeadlinePolicy) -> dict[str, Any]:
    tiers = {}
    for name, result in measured.tiers.items():
        fluidity = result.fluidity
        tiers[name] = {
            "decode_deadline_s": policy.decode_tiers[name],
            "service_level": result.service_level,
            "fluidity": describe(fluidity).to_dict(),
            "share_at_or_above_target": _share_at_least(fluidity, policy.target_fluidity),
            "requests_with_stalls": int(np.count_nonzero(result.late_events)),
            "longest_stall_s": float(result.longest_stall.max()) if len(result) else None,
            "first_miss_fraction": describe(result.first_miss_fraction).to_dict(),
        }
    return {"deadlines": policy.describe(), "tiers": tiers}


def turns_summary(results: Sequence[ProbeResult], spec: EvaluationSpec) -> dict[str, Any]:
    """First turns apart from follow-up turns (multi-turn sessions; every single request is a first
    turn): requests, TTFT, TBT, fluidity per tier, and the prompt tokens the server reported cached."""
    parts = {
        "first": [r for r in results if r.turn <= 1],
        "followup": [r for r in results if r.turn > 1],
    }
    out: dict[str, Any] = {"sessions": len({r.session for r in results if r.session is not None})}
    for name, part in parts.items():
        measured = measure(part, spec)
        out[name] = {
            "requests": len(part),
            "completed": len(measured.results),
            "ttft": describe(measured.latency.ttft).to_dict(),
            "tbt": describe(measured.latency.tbt).to_dict(),
            "fluidity": {
                tier: {"service_level": batch.service_level, "fluidity": describe(batch.fluidity).to_dict()}
                for tier, batch in measured.tiers.items()
            },
            "prompt_tokens_cached": _cached(part),
            "output_tokens": {
                "text": sum(r.text_tokens for r in measured.results),
                "tool_call": sum(r.tool_call_tokens for r in measured.results),
            },
        }
    return out


def _cached(results: Sequence[ProbeResult]) -> dict[str, Any]:
    """Prompt tokens the server reported as served from its cache, over the requests that reported it."""
    reported = [r for r in results if r.prompt_tokens_cached is not None and r.prompt_tokens_reported]
    cached = sum(r.prompt_tokens_cached or 0 for r in reported)
    prompt = sum(r.prompt_tokens_reported or 0 for r in reported)
    return {
        "requests_reporting": len(reported),
        "cached_tokens": cached,
        "prompt_tokens": prompt,
        "hit_ratio": cached / prompt if prompt else None,
    }


def _share_at_least(values: FloatArray, target: float) -> float | None:
    return float(np.mean(values >= target)) if len(values) else None


def _rates(measured: Measured, policy: DeadlinePolicy) -> dict[str, float | None]:
    """The fluid token rate beside the TPOT- and TBT-based rates the paper compares it with."""
    usable = measured.batch.lengths >= 2
    target, share = policy.target_fluidity, policy.percentile
    fluid = fluid_token_rate(measured.batch, target, share) if usable.any() else math.nan
    mean_tpot = float(np.nanmean(measured.latency.tpot)) if usable.any() else math.nan
    p99_tbt = percentile(measured.latency.tbt, 99) if len(measured.latency.tbt) else math.nan
    return {
        "fluid_token_rate": fluid,
        "tpot_based_rate": 1.0 / mean_tpot if mean_tpot > 0 else math.nan,
        "tbt_based_rate": 1.0 / p99_tbt if p99_tbt > 0 else math.nan,
    }


def _slos(results: Sequence[ProbeResult], measured: Measured, spec: EvaluationSpec) -> list[dict[str, Any]]:
    """Each objective judged as a capacity trial judges it: over every request sent, a failed one at
    the worst value (``with_failed``). A per-request SLO on TBT means on every gap: TBT SLOs are checked
    against the pooled gaps, a failed request adding one gap that never ended. ``met`` is None where
    there was nothing to judge."""
    values = metric_values(measured, slo_tier(spec.deadlines))
    values[SloMetric.TBT] = measured.latency.tbt
    failed = len(results) - len(measured.results)
    return [
        {
            "slo": str(r.objective),
            "observed": r.observed,
            "threshold": r.threshold,
            "met": r.met if r.sample_count else None,
            "samples": r.sample_count,
            "samples_of": "gaps" if r.objective.metric is SloMetric.TBT else "requests",
            "failed_requests": failed,
        }
        for r in evaluate_objectives(spec.slos, with_failed(values, failed))
    ]


def _goodput(
    results: Sequence[ProbeResult], measured: Measured, spec: EvaluationSpec, duration_s: float
) -> dict[str, Any] | None:
    if spec.goodput is None:
        return None
    values = metric_values(measured, slo_tier(spec.deadlines))
    good: Goodput = goodput(spec.goodput, values, duration_s)
    # Failed requests are never good, but they count in the total.
    total = len(results)
    return {
        "bounds": asdict(spec.goodput),
        "good": good.good,
        "total": total,
        "ratio": good.good / total if total else math.nan,
        "rate_per_s": good.rate_per_s,
    }


def request_record(result: ProbeResult, spec: EvaluationSpec) -> dict[str, Any]:
    """One line of ``requests.jsonl``: what happened, raw timings and the derived intervals."""
    values = intervals(result, from_scheduled=spec.from_scheduled)
    record: dict[str, Any] = {
        "outcome": result.outcome.value,
        "partial": result.outcome not in COMPLETED and bool(result.token_times),
        "http_status": result.http_status,
        "error": result.error,
        "api": result.api,
        "session": result.session,
        "turn": result.turn,
        "prompt_tokens_intended": result.prompt_tokens_intended,
        "prompt_tokens_reported": result.prompt_tokens_reported,
        "prompt_tokens_cached": result.prompt_tokens_cached,
        "max_tokens": result.max_tokens,
        "output_tokens": result.output_tokens,
        "tool_call_tokens": result.tool_call_tokens,
        "completion_tokens_reported": result.completion_tokens_reported,
        "token_source": result.token_source.value,
        "token_adjustment": result.token_adjustment,
        "finish_reason": result.finish_reason,
        "scheduled_at": result.scheduled_at,
        "sent_at": result.sent_at,
        "send_overhead_s": result.send_overhead_s,
        "ttft_s": values[0] if values else None,
        "e2e_s": e2e_seconds(result, spec.from_scheduled),
        "retries": result.retries,
        "unreliable": result.unreliable,
        "loop_lag_s": result.loop_lag_s,
        "loop_lag_share": result.loop_lag_share,
        "multi_event_reads": result.multi_event_reads,
        "merged_events": result.merged_events,
        "early_stamps": result.early_stamps,
        "doubtful_gaps": result.doubtful_gaps,
        "cpu_share": result.cpu_share,  # recorded, not part of the rule: a busy core on time is right
        "stamps": result.stamps,
        "intervals": values,
    }
    return cast(dict[str, Any], _json_safe(record))


def _json_safe(value: Any) -> Any:
    """NaN and infinities become None; numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
