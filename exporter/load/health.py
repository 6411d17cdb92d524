"""Health checks of the load itself (as Veeksha does): did we send what we meant to, when we meant to?

A benchmark's numbers are only as good as its load. These pure functions look at the recorded
``ProbeResult``s (whoever sent them: the in-process runner or worker processes) and say whether

* ``send_rate``: the achieved send rate kept up with the planned schedule (open loop);
* ``concurrency``: closed loop really kept N requests in flight;
* ``send_lateness``: requests left on time (``sent_at - scheduled_at``; coordinated omission made
  visible: a late sender silently lowers the offered load and hides queueing);
* ``prompt_tokens``: the server saw the prompt lengths we intended (reported vs intended);
* ``output_tokens``: the server generated the output lengths we asked for (vs ``max_tokens``);
* ``unreliable`` and ``doubtful_gaps``: the client was not saturated: few results flagged
  ``unreliable`` by the probe, and few gaps between tokens that those flags concern;
* ``success``: enough requests completed for the figures to describe the workload.

Every check carries its observed value, its threshold and a message; ``passed`` is None when the data
needed to judge it is missing (e.g. the server reported no usage), which is said in the message. A
failed check is reported, never dropped. Two kinds do not decide whether the measurement is reliable
(``exporter.report.summary.reliability``): a *workload* check (``required`` False: ``output_tokens``),
whose failure says the server served another workload than the one asked, on timings that are still
valid (a server that ends streams at its own stop despite ``ignore_eos``, as OpenAI's does), and one
that does not apply to this run (``applies`` False: ``concurrency`` for a closed loop of sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from exporter.streams.result import ProbeResult


@dataclass(frozen=True)
class HealthCheck:
    """One verdict on the load."""

    name: str
    observed: float | None
    threshold: float | None
    passed: bool | None  # None: could not be judged (the message says why)
    message: str
    required: bool = True  # False: a workload check, which warns and leaves the verdict alone
    applies: bool = True  # False: not a check of this kind of run (the message says why)


@dataclass(frozen=True)
class HealthThresholds:
    """Where each check draws the line; the defaults suit a client on a shared VM."""

    min_rate_ratio: float = 0.95  # achieved / planned send rate
    min_concurrency_ratio: float = 0.95  # time-averaged in flight / N
    max_lateness_p99_s: float = 0.025  # beyond this the offered load is no longer the planned one
    max_prompt_error_exact: float = 0.0  # median |reported - intended| / intended, exact prompts
    max_prompt_error_approx: float = 0.15  # the same for approximate (word-count) prompts
    min_full_output_share: float = 0.95  # OK requests that got all their max_tokens
    max_unreliable_share: float = 0.01  # requests the client flagged
    max_doubtful_gap_share: float = 0.001  # gaps between tokens the client may have timed wrong
    min_success_share: float = 0.95


@dataclass(frozen=True)
class Lateness:
    """Distribution of ``sent_at - scheduled_at`` in seconds (None: no request had both stamps)."""

    count: int
    p50: float | None
    p99: float | None
    max: float | None
    mean: float | None


def lateness(results: Sequence[ProbeResult]) -> Lateness:
    """How late each request left, over the requests that carry both stamps."""
    late = [
        r.sent_at - r.scheduled_at for r in results if r.sent_at is not None and r.scheduled_at is not None
    ]
    if not late:
        return Lateness(0, None, None, None, None)
    values = np.asarray(late)
    p50, p99 = np.percentile(values, [50, 99])
    return Lateness(len(late), float(p50), float(p99), float(values.max()), float(values.mean()))


def _span(stamps: Sequence[float]) -> float:
    return float(max(stamps) - min(stamps)) if len(stamps) > 1 else 0.0


def rates(results: Sequence[ProbeResult]) -> tuple[float | None, float | None]:
    """(achieved, planned) send rates in requests per second: ``(n - 1)`` over the span of ``sent_at``
    and of ``scheduled_at`` stamps. None when fewer than two stamps or a zero span."""
    sent = [r.sent_at for r in results if r.sent_at is not None]
    planned = [r.scheduled_at for r in results if r.scheduled_at is not None]
    sent_span, planned_span = _span(sent), _span(planned)
    achieved = (len(sent) - 1) / sent_span if sent_span > 0 else None
    return achieved, (len(planned) - 1) / planned_span if planned_span > 0 else None


def check_send_rate(
    results: Sequence[ProbeResult], target_rate: float | None, limits: HealthThresholds
) -> HealthCheck:
    """Achieved send rate against the planned schedule's own rate (a random schedule's rate differs
    from its nominal target by chance, which is no fault of the sender; the target is quoted too)."""
    achieved, planned = rates(results)
    nominal = f"; nominal target {target_rate:g} req/s" if target_rate is not None else ""
    if achieved is None or planned is None:
        return HealthCheck("send_rate", achieved, planned, None, f"fewer than two timed sends{nominal}")
    ratio = achieved / planned
    passed = ratio >= limits.min_rate_ratio
    verdict = "kept up with" if passed else "fell behind"
    message = (
        f"sent {achieved:.3g} req/s, {ratio:.1%} of the planned {planned:.3g} req/s: "
        f"the sender {verdict} the schedule (needs >= {limits.min_rate_ratio:.0%}){nominal}"
    )
    return HealthCheck("send_rate", achieved, planned * limits.min_rate_ratio, bool(passed), message)


def mean_in_flight(results: Sequence[ProbeResult]) -> float | None:
    """Time-averaged requests in flight between the first and the last send (the steady part of a
    closed loop: before the first send it is filling, after the last one it drains)."""
    spans = [
        (r.sent_at, r.finished_at) for r in results if r.sent_at is not None and r.finished_at is not None
    ]
    if len(spans) < 2:
        return None
    start = min(s for s, _ in spans)
    end = max(s for s, _ in spans)
    if end <= start:
        return None
    busy = sum(max(0.0, min(f, end) - max(s, start)) for s, f in spans)
    return float(busy / (end - start))


def check_concurrency(
    results: Sequence[ProbeResult], concurrency: int, limits: HealthThresholds
) -> HealthCheck:
    """Closed loop: the time-averaged number in flight against N."""
    observed = mean_in_flight(results)
    threshold = concurrency * limits.min_concurrency_ratio
    if observed is None:
        return HealthCheck("concurrency", None, threshold, None, "too few finished requests to judge")
    passed = bool(observed >= threshold)
    message = f"{observed:.2f} requests in flight on average for a concurrency of {concurrency}"
    return HealthCheck("concurrency", observed, threshold, passed, message + ("" if passed else ": too few"))


def check_lateness(results: Sequence[ProbeResult], limits: HealthThresholds) -> HealthCheck:
    """p99 of send lateness against the limit; p50 and max in the message."""
    late = lateness(results)
    threshold = limits.max_lateness_p99_s
    if late.p99 is None or late.p50 is None or late.max is None:
        return HealthCheck(
            "send_lateness", None, threshold, None, "no request has both scheduled and sent times"
        )
    passed = bool(late.p99 <= threshold)
    message = (
        f"sent late by p50 {late.p50 * 1e3:.2f} ms, p99 {late.p99 * 1e3:.2f} ms, max {late.max * 1e3:.2f} ms "
        f"(p99 limit {threshold * 1e3:g} ms)" + ("" if passed else ": the offered load lagged its schedule")
    )
    return HealthCheck("send_lateness", late.p99, threshold, passed, message)


def check_prompt_tokens(results: Sequence[ProbeResult], exact: bool, limits: HealthThresholds) -> HealthCheck:
    """Median relative error of the server's reported prompt tokens against the intended ones."""
    pairs = [
        (r.prompt_tokens_reported, r.prompt_tokens_intended)
        for r in results
        if r.prompt_tokens_reported is not None and r.prompt_tokens_intended
    ]
    threshold = limits.max_prompt_error_exact if exact else limits.max_prompt_error_approx
    kind = "exact" if exact else "approximate"
    if not pairs:
        # Where no request completed, the server had no chance to report any: say that, not that it
        # reports none (which sends an operator looking for a usage option).
        why = (
            "no request completed"
            if not any(r.ok for r in results)
            else "the server reported no prompt tokens"
        )
        return HealthCheck("prompt_tokens", None, threshold, None, f"not judged: {why} ({kind})")
    errors = np.asarray([abs(rep - want) / want for rep, want in pairs])
    observed = float(np.median(errors))
    passed = bool(observed <= threshold)
    message = (
        f"reported prompt tokens differ from the intended by {observed:.1%} at the median "
        f"(worst {errors.max():.1%}, {len(pairs)} requests, {kind} prompts, limit {threshold:.0%})"
    )
    return HealthCheck("prompt_tokens", observed, threshold, passed, message)


def check_output_tokens(results: Sequence[ProbeResult], limits: HealthThresholds) -> HealthCheck:
    """Share of OK requests that got all the tokens they asked for (reported count, else received)."""
    asked = [r for r in results if r.ok and r.max_tokens]
    threshold = limits.min_full_output_share
    if not asked:
        return HealthCheck("output_tokens", None, threshold, None, "no completed request with max_tokens")
    got = [_output_count(r) for r in asked]
    full = sum(1 for r, n in zip(asked, got, strict=True) if n >= (r.max_tokens or 0))
    observed = full / len(asked)
    ratio = float(np.median([n / (r.max_tokens or 1) for r, n in zip(asked, got, strict=True)]))
    passed = bool(observed >= threshold)
    message = (
        f"{observed:.1%} of completed requests got all their max_tokens (median got/asked {ratio:.2f}, "
        f"needs >= {threshold:.0%})" + ("" if passed else OUTPUT_SHORTFALL)
    )
    return HealthCheck("output_tokens", observed, threshold, passed, message, required=False)


# The server ended streams before max_tokens (at its own stop, ignoring ignore_eos): every stream
# completed and was timed, so the figures stand, for shorter outputs than the workload's.
OUTPUT_SHORTFALL = ": the server ended streams early; outputs are shorter than the workload's, timings valid"


def _output_count(result: ProbeResult) -> int:
    reported = result.completion_tokens_reported
    return reported if reported is not None else result.output_tokens


def check_unreliable(results: Sequence[ProbeResult], limits: HealthThresholds) -> HealthCheck:
    """Share of results the probe's client flagged unreliable: it read chunks of a stream together or
    late, from too much load for its CPU or a machine that stalled it (it cannot tell which). The bound
    of the figures each request gives one sample of (its TTFT, fluidity, longest gap, SLO verdict)."""
    threshold = limits.max_unreliable_share
    if not results:
        return HealthCheck("unreliable", None, threshold, None, "no results")
    observed = sum(r.unreliable for r in results) / len(results)
    passed = bool(observed <= threshold)
    message = (
        f"{observed:.1%} of requests were timed unreliably by the client: it read chunks together or "
        f"late, too busy or stalled (limit {threshold:.0%})"
    )
    return HealthCheck("unreliable", observed, threshold, passed, message)


def check_doubtful_gaps(results: Sequence[ProbeResult], limits: HealthThresholds) -> HealthCheck:
    """Share of all the gaps between token events (the first: from the send) that the flagged requests
    may have wrong (``ProbeResult.doubtful_gaps``). The bound of the distributions of the gaps
    themselves (TBT): under it each of their percentiles lies within that share of its rank of the
    truth's (nearly: the gaps here are per event, the first one from the send, where TBT is per token
    and starts at the first). It catches what the share of requests does not: a few long requests whose
    every stamp was a late loop's (read-time stamps: TLS), or many merged reads in a few requests."""
    threshold = limits.max_doubtful_gap_share
    gaps = sum(r.token_events for r in results)
    doubtful = sum(r.doubtful_gaps for r in results)
    if not gaps:  # nothing was timed, so nothing timed is in doubt (success says why)
        return HealthCheck("doubtful_gaps", 0.0, threshold, True, "no gap between tokens was timed")
    observed = doubtful / gaps
    passed = bool(observed <= threshold)
    message = (
        f"{doubtful} of {gaps} gaps between tokens ({observed:.3%}) may be wrong, in the requests the "
        f"client flagged (limit {threshold:.1%})"
    )
    return HealthCheck("doubtful_gaps", observed, threshold, passed, message)


def check_success(results: Sequence[ProbeResult], limits: HealthThresholds) -> HealthCheck:
    """Share of requests that completed (``ProbeResult.ok``); the message lists the failure outcomes."""
    threshold = limits.min_success_share
    if not results:
        return HealthCheck("success", None, threshold, None, "no results")
    observed = sum(r.ok for r in results) / len(results)
    failures: dict[str, int] = {}
    for r in results:
        if not r.ok:
            failures[r.outcome.value] = failures.get(r.outcome.value, 0) + 1
    detail = ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none failed"
    message = f"{observed:.1%} of {len(results)} requests completed ({detail}; needs >= {threshold:.0%})"
    return HealthCheck("success", observed, threshold, bool(observed >= threshold), message)


def load_health(
    results: Sequence[ProbeResult],
    *,
    target_rate: float | None = None,
    concurrency: int | None = None,
    prompt_tokens_exact: bool = False,
    limits: HealthThresholds | None = None,
) -> list[HealthCheck]:
    """Every check that applies: ``send_rate`` for an open loop (no ``concurrency``), ``concurrency``
    for a closed one (its ``scheduled_at`` is when a slot freed, so its lateness is the client's own
    overhead), then lateness, lengths, reliability and success for both. Works on results from the
    in-process runner and from worker processes alike."""
    limits = limits or HealthThresholds()
    # The schedule starts sessions: a session's later turns follow its answers, not the schedule.
    starts = [r for r in results if r.turn <= 1]
    if concurrency is None:
        first = check_send_rate(starts, target_rate, limits)
    elif len(starts) < len(results):
        message = "does not apply to a closed loop of sessions: think times leave slots idle by design"
        threshold = concurrency * limits.min_concurrency_ratio
        first = HealthCheck("concurrency", None, threshold, None, message, applies=False)
    else:
        first = check_concurrency(results, concurrency, limits)
    return [
        first,
        check_lateness(starts, limits),
        check_prompt_tokens(results, prompt_tokens_exact, limits),
        check_output_tokens(results, limits),
        check_unreliable(results, limits),
        check_doubtful_gaps(results, limits),
        check_success(results, limits),
    ]
