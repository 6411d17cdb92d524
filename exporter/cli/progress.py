"""Progress on stderr while a command's load runs: ``bench``'s live figures, ``capacity``'s bar.

Both run beside the measurement, so each keeps its own cost small: a redraw at most once a second (or a
line every tenth of the way, off a terminal), and a trial's request count at most every 10 seconds.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from exporter.evaluation import EvaluationSpec
from exporter.stats.fluidity import fluidity_index
from exporter.stats.objectives import DECODE_TIERS, DEFAULT_DECODE_TIER
from exporter.streams.result import ProbeResult, intervals

BAR_WIDTH = 24
PROGRESS_EVERY_S = 10.0


class LiveLine:
    """Live TTFT/TBT/fluidity on stderr while the load runs.

    It runs on the probe's event loop, so each result costs it one single-request fluidity evaluation
    and a redraw is at most once a second over bounded samples: the measurement must not be disturbed
    by its own progress display. On a terminal one line is rewritten; elsewhere a line every 10%.
    """

    GAP_SAMPLE = 5000  # the latest gaps kept for the TBT percentiles

    def __init__(self, total: int | None, spec: EvaluationSpec, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        default_tier = (DEFAULT_DECODE_TIER, DECODE_TIERS[DEFAULT_DECODE_TIER])
        self.tier_name, self.tier_deadline = next(iter(spec.deadlines.decode_tiers.items()), default_tier)
        self.prefill = spec.deadlines.prefill_deadline
        self.count = self.failed = 0
        self.ttfts: list[float] = []
        self.fluidity: list[float] = []
        self.gaps: deque[float] = deque(maxlen=self.GAP_SAMPLE)
        self.last_draw = 0.0
        self.next_mark = 0.1

    def __call__(self, result: ProbeResult) -> None:
        self.count += 1
        if not self.enabled:  # nothing drawn (--quiet): nothing computed on the probe's loop either
            return
        values = intervals(result)
        if result.ok and values:
            self.ttfts.append(values[0])
            self.gaps.extend(values[1:])
            self.fluidity.append(fluidity_index(values, self.prefill, self.tier_deadline))
        else:
            self.failed += 1
        if self._due():
            sys.stderr.write(("\r" if self.tty else "") + self.render() + ("" if self.tty else "\n"))
            sys.stderr.flush()

    def _due(self) -> bool:
        now = time.monotonic()
        if self.tty:
            if now - self.last_draw < 1.0 and self.count != self.total:
                return False
            self.last_draw = now
            return True
        if self.total is None or self.count / self.total + 1e-9 < self.next_mark:
            return self.total is None and self.count % 50 == 0
        self.next_mark += 0.1
        return True

    def render(self) -> str:
        progress = f"{self.count}/{self.total}" if self.total else f"{self.count}"
        if not self.ttfts:
            return f"[{progress}] failed {self.failed}"
        gaps = np.fromiter(self.gaps, dtype=np.float64) if self.gaps else np.zeros(1)
        return (
            f"[{progress}] failed {self.failed} | TTFT p50 {np.median(self.ttfts):.3f}s"
            f" | TBT p50 {np.median(gaps) * 1e3:.1f}ms p99 {np.percentile(gaps, 99) * 1e3:.1f}ms"
            f" | fluidity({self.tier_name}) p50 {np.median(self.fluidity):.3f} min {min(self.fluidity):.3f}  "
        )

    def close(self) -> None:
        if self.enabled and self.tty and self.count:
            sys.stderr.write("\n")


def progress_line(fraction: float, message: str) -> str:
    """A bar and what happens now (a trial starting, its requests done, a trial's outcome)."""
    bar = "#" * round(min(max(fraction, 0.0), 1.0) * BAR_WIDTH)
    return f"[{bar:<{BAR_WIDTH}}] {fraction:4.0%} {message}"


class ProgressPrinter:
    """Progress lines on stderr: every trial's start and outcome, and its requests at most every
    ``every_s`` seconds (the first trial of a slow target takes minutes: it must not be silent)."""

    def __init__(
        self, every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s, self.clock, self.last = every_s, clock, -math.inf

    def __call__(self, fraction: float, message: str) -> None:
        now = self.clock()
        in_trial = message.endswith(" done") and not message.startswith("capacity")
        if in_trial and now - self.last < self.every_s:
            return
        self.last = now
        print(progress_line(fraction, message), file=sys.stderr)
