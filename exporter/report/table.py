"""The summary a person reads at the end of ``fluidity-exporter bench``: plain-text tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LATENCY_ROWS = (
    ("TTFT (s)", "ttft", 1.0, "{:.3f}"),
    ("TBT (ms)", "tbt", 1e3, "{:.1f}"),
    ("TPOT (ms)", "tpot", 1e3, "{:.1f}"),
    ("E2E (s)", "e2e", 1.0, "{:.2f}"),
    ("normalized latency (ms/token)", "normalized_latency", 1e3, "{:.1f}"),
    ("longest gap per request (s)", "longest_gap", 1.0, "{:.3f}"),
    ("output tokens per request", "output_tokens", 1.0, "{:.0f}"),
)
STATS = ("p50", "p90", "p99", "mean", "max")
UNRELIABLE_CAVEAT = " (judged on a measurement that is NOT reliable: see the health of the load below)"


def render_summary(summary: Mapping[str, Any]) -> str:
    """Every section of the summary as aligned text."""
    parts = [
        _requests(summary),
        _latency(summary["latency"]),
        _fluidity(summary["fluidity"]),
        _rates(summary["rates"]),
    ]
    turns = summary.get("turns") or {}
    if turns.get("followup", {}).get("requests"):
        parts.append(_turns(turns))
    # Judged on the run's own timings: with a health check failed, said where they are, not only
    # at the end (an operator reading "met" should not have to scroll to learn it rests on nothing).
    caveat = "" if summary.get("reliable") else UNRELIABLE_CAVEAT  # as verdict_line reads it
    if summary.get("goodput"):
        parts.append(_goodput(summary["goodput"], summary["duration_s"]) + caveat)
    if summary.get("slos"):
        parts.append(_slos(summary["slos"], caveat))
    if summary.get("health_checks"):
        parts.append(_health(summary["health_checks"]))
    parts.append(verdict_line(summary))
    return "\n\n".join(parts)


# What to do about each failed check, in a few words: the client's own checks (it was too busy to send
# or time the load), the target's (it failed requests), the prompts' (the server counts other tokens).
CLIENT_CHECKS = ("send_rate", "concurrency", "send_lateness", "unreliable", "doubtful_gaps")
CLIENT_ADVICE = (
    "the client was too busy to send or time the load as planned: send fewer streams at once (a lower "
    "--rate or --concurrency), spread them over processes (--workers N), or run on a quieter machine"
)
CHECK_ADVICE = {
    "success": "the target failed requests: their first errors are listed under requests above",
    "prompt_tokens": "the server reported other prompt lengths than the workload's, or none (see above)",
}


def verdict_line(summary: Mapping[str, Any]) -> str:
    """``measurement: reliable ...`` or ``measurement: NOT reliable: <checks> failed; <what to do>``, from
    the summary's own ``reliable``, ``failed_checks`` and ``workload_warnings`` (the rule is
    ``exporter.report.summary.RELIABILITY_RULE``)."""
    warned = ", ".join(summary.get("workload_warnings") or ())
    if summary.get("reliable"):
        if warned:
            return f"measurement: reliable (every health check of the load passed; {warned} warns: see above)"
        return "measurement: reliable (every health check of the load passed)"
    failed = list(summary.get("failed_checks") or ())
    return f"measurement: NOT reliable: {', '.join(failed) or '?'} failed; {verdict_advice(failed)}"


def verdict_advice(failed: list[str]) -> str:
    """What to do about the failed checks, one clause each kind, the client's first."""
    advice = [CLIENT_ADVICE] if any(name in CLIENT_CHECKS for name in failed) else []
    advice += [CHECK_ADVICE[name] for name in failed if name in CHECK_ADVICE]
    return "; ".join(advice) or "every health check must pass (see above)"


def _turns(turns: Mapping[str, Any]) -> str:
    """First turns beside follow-up turns: what a user feels on turn 1 and later in a conversation."""
    lines = [f"{'sessions: ' + str(turns['sessions']):<32}{'first turns':>16}{'follow-ups':>16}"]
    first, follow = turns["first"], turns["followup"]

    def row(label: str, pick: Any, fmt: str, scale: float = 1.0) -> None:
        values = [_number(pick(part), fmt, scale) for part in (first, follow)]
        lines.append(f"{label:<32}{values[0]:>16}{values[1]:>16}")

    row("requests", lambda p: p["requests"], "{:.0f}")
    row("TTFT p50 (s)", lambda p: p["ttft"]["p50"], "{:.3f}")
    row("TTFT p99 (s)", lambda p: p["ttft"]["p99"], "{:.3f}")
    row("TBT p99 (ms)", lambda p: p["tbt"]["p99"], "{:.1f}", 1e3)
    for tier in first["fluidity"]:
        row(
            f"fluidity service level ({tier})",
            lambda p, t=tier: p["fluidity"].get(t, {}).get("service_level"),
            "{:.3f}",
        )
    row("prompt tokens cached (share)", lambda p: p["prompt_tokens_cached"]["hit_ratio"], "{:.3f}")
    return "\n".join(lines)


def _number(value: Any, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else fmt.format(value * scale)


def _requests(summary: Mapping[str, Any]) -> str:
    requests = summary["requests"]
    outcomes = ", ".join(f"{name} {count}" for name, count in sorted(requests["by_outcome"].items()))
    sources = ", ".join(f"{name} {count}" for name, count in sorted(requests["token_sources"].items()))
    throughput = summary["throughput"]
    errors = [f"  first {name}: {_clipped(error)}" for name, error in sorted(requests["first_error"].items())]
    return "\n".join(
        [
            f"requests: {requests['total']} sent, {requests['completed']} completed ({outcomes})",
            *errors,
            f"token counts from: {sources or '-'}; retried on a fresh connection: {requests['retried']}; "
            f"unreliable timings: {requests['unreliable']}",
            f"duration {summary['duration_s']:.1f} s; "
            f"{_number(throughput['completed_requests_per_s'], '{:.2f}')} req/s, "
            f"{_number(throughput['output_tokens_per_s'], '{:.0f}')} output tok/s",
        ]
    )


def _clipped(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())  # one line, whatever the server put in its message
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _latency(latency: Mapping[str, Any]) -> str:
    width = max(len(label) for label, *_ in LATENCY_ROWS)
    lines = [f"{'':{width}}  " + "".join(f"{name:>10}" for name in STATS)]
    for label, key, scale, fmt in LATENCY_ROWS:
        row = latency[key]
        lines.append(f"{label:{width}}  " + "".join(f"{_number(row[s], fmt, scale):>10}" for s in STATS))
    return "\n".join(lines)


def _fluidity(fluidity: Mapping[str, Any]) -> str:
    deadlines = fluidity["deadlines"]
    prefill = deadlines["prefill"]
    dp = f"{prefill['seconds']} s" if prefill["kind"] == "constant" else "profiled model + slack"
    target = deadlines["target_fluidity"]
    lines = [f"fluidity-index (prefill deadline {dp}; target {target})"]
    lines.append(f"{'tier':10}{'Dd (ms)':>9}{'level':>8}{'min':>8}{'p50':>8}{f'>={target}':>9}{'stalled':>9}")
    for name, tier in fluidity["tiers"].items():
        dist = tier["fluidity"]
        share = tier["share_at_or_above_target"]
        lines.append(
            f"{name:10}{tier['decode_deadline_s'] * 1e3:>9.0f}{_number(tier['service_level'], '{:.3f}'):>8}"
            f"{_number(dist['min'], '{:.3f}'):>8}{_number(dist['p50'], '{:.3f}'):>8}"
            f"{_number(share, '{:.0%}'):>9}{tier['requests_with_stalls']:>9}"
        )
    return "\n".join(lines)


def _rates(rates: Mapping[str, Any]) -> str:
    return (
        f"fluid token rate {_number(rates['fluid_token_rate'], '{:.1f}')} tok/s  "
        f"(TPOT-based {_number(rates['tpot_based_rate'], '{:.1f}')}, "
        f"TBT-based {_number(rates['tbt_based_rate'], '{:.1f}')})"
    )


def _goodput(goodput: Mapping[str, Any], duration_s: float) -> str:
    # Per second of the whole run, first send to last end, as vLLM's benchmark counts goodput (capacity
    # trials count it per second of offered load instead): said, since the two differ.
    return (
        f"goodput: {goodput['good']} of {goodput['total']} requests met every bound "
        f"({_number(goodput['ratio'], '{:.1%}')}, {_number(goodput['rate_per_s'], '{:.2f}')} req/s "
        f"over the run's {_number(duration_s, '{:.1f}')} s, first send to last end)"
    )


def _slos(slos: list[Mapping[str, Any]], caveat: str = "") -> str:
    lines = [f"SLOs{caveat}:"]
    for slo in slos:
        lines.append(f"  {_slo_mark(slo['met']):6} {slo['slo']:24} {_slo_basis(slo)}")
    return "\n".join(lines)


def _slo_mark(met: bool | None) -> str:
    return "n/a" if met is None else "met" if met else "MISSED"


def _slo_basis(slo: Mapping[str, Any]) -> str:
    """What the verdict was judged on: the observed value, over how many samples, and the failed
    requests among them (each at the worst value: it counts against the objective)."""
    if not slo["samples"]:
        return "not judged: no request to judge it on"
    failed = slo["failed_requests"]
    text = f"observed {_number(slo['observed'], '{:.4g}')} over {slo['samples']} {slo['samples_of']}"
    return text + (f" ({failed} failed requests, each counted against it)" if failed else "")


def _health(checks: list[Mapping[str, Any]]) -> str:
    lines = ["health of the load itself:"]
    for check in checks:
        lines.append(f"  {_mark(check)} {check.get('name', '?')}: {check.get('message', '')}")
    return "\n".join(lines)


def _mark(check: Mapping[str, Any]) -> str:
    """``ok``, ``FAIL``, ``warn`` (a workload check failed) or ``n/a`` (it does not apply to the run).
    One that could not be judged fails (RELIABILITY_RULE): marked so, as the verdict line counts it (an
    "n/a" mark beside "NOT reliable: prompt_tokens failed" read as two rules)."""
    passed = check.get("passed")
    if not check.get("applies", True):
        return "n/a "
    if passed is True:
        return "ok  "
    if not check.get("required", True):
        return "warn" if passed is False else "n/a "
    return "FAIL"
