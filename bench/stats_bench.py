"""Benchmark of the metric core: batched fluidity vs a literal per-token loop, and the fluid token rate.

Run: ``python bench/stats_bench.py [--requests 4000] [--seed 7]``. Prints, from one run on the same
data, tokens/s of ``exporter.stats.fluidity.evaluate`` and of an Etalon-style Python loop with their
ratio (goal >= 10x), and the time of ``fluid_token_rate`` over 10k requests x 256 tokens (goal < 2 s).
Both implementations must agree on every request, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate, fluid_token_rate

PREFILL_DEADLINE = 0.5
DECODE_DEADLINE = 0.05  # the paper's medium tier


def realistic_trace(requests: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat intervals and per-request token counts: lognormal lengths and gaps, chunk bursts, stalls."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(220), 0.8, requests), 2, 4096).astype(np.int64)
    gaps = rng.lognormal(np.log(0.02), 0.35, int(lengths.sum()))
    gaps[rng.random(len(gaps)) < 0.1] = 0.0  # several tokens in one chunk
    stalls = rng.random(len(gaps)) < 0.005  # preemptions, prefills of other requests
    gaps[stalls] *= rng.uniform(5, 100, int(stalls.sum()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    gaps[starts] = rng.lognormal(np.log(0.3), 0.5, requests)  # TTFT
    return gaps, lengths


def etalon_loop(requests: list[list[float]], dp: float, dd: float) -> list[tuple[int, int]]:
    """The per-token loop as Etalon writes it, one request at a time."""
    results = []
    for intervals in requests:
        slack, missed, total = 0.0, 0, 0
        for i, t in enumerate(intervals):
            deadline = dp if i == 0 else dd
            if t <= deadline + slack:
                slack += deadline - t
                total += 1
            else:
                misses = math.floor((t - slack - deadline) / dd) + 1
                missed += misses
                total += misses
                slack = 0.0
        results.append((missed, total))
    return results


def best_of(runs: int, func, *args):  # type: ignore[no-untyped-def]
    best, result = math.inf, None
    for _ in range(runs):
        start = time.perf_counter()
        result = func(*args)
        best = min(best, time.perf_counter() - start)
    return best, result


def batched(values: np.ndarray, lengths: np.ndarray):  # type: ignore[no-untyped-def]
    # Building the batch (validation and the transposed layout) is part of the measured cost.
    return evaluate(IntervalBatch.from_flat(values, lengths), PREFILL_DEADLINE, DECODE_DEADLINE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    values, lengths = realistic_trace(args.requests, args.seed)
    tokens = len(values)
    as_lists = [chunk.tolist() for chunk in np.split(values, np.cumsum(lengths)[:-1])]
    loop_s, expected = best_of(2, etalon_loop, as_lists, PREFILL_DEADLINE, DECODE_DEADLINE)
    batch_s, result = best_of(5, batched, values, lengths)
    got = list(zip(result.missed.astype(int).tolist(), result.total.astype(int).tolist(), strict=True))
    if got != expected:
        raise SystemExit("batched fluidity disagrees with the per-token loop")
    late = int(result.late_events.sum())
    print(f"trace: {args.requests} requests, {tokens:,} tokens, {late:,} late tokens, seed {args.seed}")
    print(f"service level at Dp={PREFILL_DEADLINE}s Dd={DECODE_DEADLINE}s: {result.service_level:.4f}")
    print(f"per-token python loop : {tokens / loop_s / 1e6:8.2f} M tokens/s ({loop_s * 1e3:.0f} ms)")
    print(f"batched (exporter)    : {tokens / batch_s / 1e6:8.2f} M tokens/s ({batch_s * 1e3:.0f} ms)")
    print(f"speed-up              : {loop_s / batch_s:8.1f}x   (goal >= 10x)")

    rng = np.random.default_rng(args.seed)
    gaps = rng.lognormal(np.log(0.02), 0.35, (10_000, 256))
    gaps[rng.random(gaps.shape) < 0.005] *= 30
    gaps[:, 0] = 0.3
    fixed = IntervalBatch.from_flat(gaps.reshape(-1), np.full(10_000, 256))
    rate_s, rate = best_of(3, fluid_token_rate, fixed)
    print(f"fluid token rate, 10k requests x 256 tokens: {rate:.3f} tok/s in {rate_s:.2f} s   (goal < 2 s)")
    uniform = IntervalBatch.from_flat(np.tile(np.r_[0.3, np.full(255, 0.02)], 1000), np.full(1000, 256))
    print(
        f"fluid token rate of uniform 20 ms gaps: {fluid_token_rate(uniform)!r} tok/s (exactly 50 expected)"
    )


if __name__ == "__main__":
    main()
