"""The fluidity-index of one request, token by token: Etalon's algorithm in its literal form.

This is the definition every faster engine must reproduce bit for bit. The fast engine hands it the
rare requests whose tokens land within rounding distance of a deadline, where only replaying the exact
float operations in order can tell on-time from late.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from exporter.stats.accounting import FluidityOptions, RequestFluidity


def loop_request(
    intervals: Sequence[float], prefill_deadline: float, decode_deadline: float, options: FluidityOptions
) -> RequestFluidity:
    """Deadline accounting of one request by the per-token loop."""
    slack, missed, met = 0.0, 0, 0
    late_events, longest_stall, first_miss = 0, 0.0, None
    cap = options.slack_cap
    for index, interval in enumerate(intervals):
        if index == 0 and options.ignore_first_token:
            continue
        deadline = prefill_deadline if index == 0 else decode_deadline
        if interval <= deadline + slack:
            slack += deadline - interval
            if cap is not None:
                slack = min(slack, cap)
            met += 1
            continue
        if options.variant == "deadlines":
            missed += math.floor((interval - slack - deadline) / decode_deadline) + 1
        else:
            missed += 1
        slack = 0.0
        late_events += 1
        longest_stall = max(longest_stall, interval)
        first_miss = index if first_miss is None else first_miss
    return RequestFluidity(
        missed=missed,
        total=met + missed,
        late_events=late_events,
        longest_stall=longest_stall,
        first_miss_index=first_miss,
        tokens=max(len(intervals) - int(options.ignore_first_token), 0),
    )
