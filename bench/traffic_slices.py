"""How long evaluating observed user records holds the event loop: in slices against all at once.

The observer stamps every user chunk on the daemon's loop, and ``TrafficStats`` evaluates finished
records on that loop too. This runs the daemon's loop (uvloop where the daemon uses it) with a timer
that asks to wake every millisecond and records how late it woke (what a stamp taken then would be
off by), while records of 200 tokens arrive at a steady rate. Two arms, alternating, same records:

* ``at once``: the earlier rule, every ``AT_ONCE`` (256) waiting records evaluated in one call;
* ``sliced``: ``TrafficStats.add`` as shipped, ``SLICE`` records at a time, the loop let run between.

Printed per run: the largest lateness and its p99, and the loop's CPU per record; then the medians of
each arm and the ratios sliced / at once. The lag rule flags every stream in flight when the loop
stalls past ``streams.saturation.STALL_LIMIT_S`` (20 ms).

Usage: ``python bench/traffic_slices.py [--runs 3] [--rate 400] [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.evaluation import EvaluationSpec  # noqa: E402
from exporter.exposition.traffic_stats import SLICE, TrafficStats  # noqa: E402
from exporter.probe import loop as _loop  # noqa: E402,F401 (uvloop where the daemon uses it)
from exporter.settings.buckets import DEFAULT_BUCKETS  # noqa: E402
from exporter.streams.result import Outcome, ProbeResult  # noqa: E402
from exporter.streams.saturation import STALL_LIMIT_S  # noqa: E402
from exporter.traffic.record import Observed  # noqa: E402

AT_ONCE = 256  # the earlier rule's batch
TOKENS = 200
WINDOWS = {"5m": 300.0, "1h": 3600.0}


class AtOnce(TrafficStats):
    """The earlier rule: every ``AT_ONCE`` waiting records evaluated in one call on the loop."""

    def add(self, observed: Observed) -> None:
        self._pending.append(observed)
        if len(self._pending) >= AT_ONCE:
            self.flush()


def records(count: int, seed: int) -> list[Observed]:
    rng = np.random.default_rng(seed)
    made = []
    for _ in range(count):
        times = (0.3 + np.concatenate([[0.0], np.cumsum(rng.exponential(0.02, TOKENS - 1))])).tolist()
        result = ProbeResult(
            "chat",
            Outcome.OK,
            sent_at=0.0,
            token_times=times,
            token_counts=[1] * TOKENS,
            finished_at=times[-1],
        )
        made.append(Observed(result, "m", request_bytes=400))
    return made


async def one_run(stats: TrafficStats, feed: list[Observed], rate: float) -> tuple[float, float, float]:
    """(largest lateness s, p99 lateness s, CPU s per record) while ``feed`` arrives at ``rate``/s."""
    late: list[float] = []
    done = asyncio.Event()

    async def timer() -> None:
        while not done.is_set():
            due = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            late.append(max(time.perf_counter() - due, 0.0))

    ticking = asyncio.ensure_future(timer())
    began, cpu = time.perf_counter(), time.process_time()
    for index, record in enumerate(feed):
        wait = began + index / rate - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        stats.add(record)
    await asyncio.sleep(0.05)
    stats.flush()
    spent = time.process_time() - cpu
    done.set()
    await ticking
    return max(late), float(np.percentile(late, 99)), spent / len(feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=400.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    feed = records(int(args.rate * args.seconds), seed=0)
    arms: dict[str, type[TrafficStats]] = {"at once": AtOnce, "sliced": TrafficStats}
    seen: dict[str, list[tuple[float, float, float]]] = {name: [] for name in arms}
    print(
        f"{len(feed)} records of {TOKENS} tokens at {args.rate:g}/s; slice {SLICE}, at once {AT_ONCE}; "
        f"stall limit {STALL_LIMIT_S * 1e3:.0f} ms"
    )
    for run in range(args.runs):
        for name, kind in arms.items() if run % 2 == 0 else reversed(arms.items()):
            stats = kind(EvaluationSpec(), DEFAULT_BUCKETS, WINDOWS)
            worst, p99, per_record = asyncio.run(one_run(stats, feed, args.rate))
            seen[name].append((worst, p99, per_record))
            print(
                f"  run {run + 1} {name:>7}: loop late max {worst * 1e3:6.2f} ms, p99 {p99 * 1e3:5.2f} ms, "
                f"CPU {per_record * 1e3:.3f} ms a record"
            )
    medians = {name: [statistics.median(v[i] for v in runs) for i in range(3)] for name, runs in seen.items()}
    for name, (worst, p99, per_record) in medians.items():
        print(
            f"  median {name:>7}: max {worst * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, CPU {per_record * 1e3:.3f} ms"
        )
    (w0, p0, c0), (w1, p1, c1) = medians["at once"], medians["sliced"]
    print(f"  sliced / at once: max {w1 / w0:.2f}x, p99 {p1 / p0:.2f}x, CPU a record {c1 / c0:.2f}x")


if __name__ == "__main__":
    main()
