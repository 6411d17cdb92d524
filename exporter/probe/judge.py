"""The saturation verdict on a finished probe request: the evidence its client's lag monitor and stamped
reads gathered, recorded on its ``ProbeResult``, and the rule of ``saturation`` applied to it.

Apart from the rule because it asks the probe's own socket reads how late they came
(``socket_reads.reads_lateness``); the rule itself is pure and judges the observer's records too.
"""

from __future__ import annotations

from exporter.probe.socket_reads import reads_lateness
from exporter.streams.result import ProbeResult
from exporter.streams.saturation import (
    LagMonitor,
    ReadEvidence,
    doubtful_gaps,
    gaps_near_stalls,
    is_unreliable,
)


def judge(result: ProbeResult, monitor: LagMonitor | None, mark: int) -> None:
    """Record a finished request's saturation evidence on ``result`` (what ``monitor`` sampled since
    ``mark``, and with kernel stamps how late the stamped reads came) and apply the rule to it:
    ``unreliable`` and ``doubtful_gaps``."""
    if monitor is not None:
        result.loop_lag_s, result.loop_lag_share = monitor.since(mark)
        result.cpu_share = monitor.cpu_share_since(mark)
        if result.kernel_stamps and result.sent_at is not None:  # the stamped reads' own lateness, too
            result.loop_lag_s = max(result.loop_lag_s, reads_lateness(result.sent_at))
    evidence = ReadEvidence.of(result, int(result.extra.get("token_reads", 0)))
    result.unreliable = is_unreliable(evidence)
    near_stalls = _near_stalls(result, monitor, mark)
    result.doubtful_gaps = doubtful_gaps(evidence, result.token_events, near_stalls)


def _near_stalls(result: ProbeResult, monitor: LagMonitor | None, mark: int) -> int | None:
    """The gaps a flagged request's stalls may have made wrong when its stamps were the loop's
    (``gaps_near_stalls``); None when unknown or not asked (kernel stamps: a late loop does not make
    a stamp late)."""
    if not result.unreliable or result.kernel_stamps or monitor is None:
        return None
    stalls = monitor.stalls_since(mark)
    if stalls is None:
        return None
    return gaps_near_stalls(sorted(result.token_times + result.reasoning_times), stalls) if stalls else 0
