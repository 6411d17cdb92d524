"""The demo's comparison (``fluidity-exporter demo``): the metric core on the simulated engine, no GPU and
no network.

Runs one workload through the built-in engine model on a virtual clock twice, with vLLM's whole-prompt
prefills and with chunked prefills (Sarathi-Serve), profiles the prefill deadline model the way Etalon
does, and returns a side-by-side table: conventional metrics barely tell the two apart, the
fluidity-index and the fluid token rate do (the Etalon paper's section 5.2).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from exporter.sim.engine import Engine, SimRequest, run_virtual
from exporter.sim.engine_presets import Preset, isolated_ttft
from exporter.stats.batch import IntervalBatch, intervals_from_stamps
from exporter.stats.distribution import percentile
from exporter.stats.fluidity import evaluate, fluid_token_rate
from exporter.stats.latency import decode_rate_from_tbt, decode_rate_from_tpot, latency_batch
from exporter.stats.objectives import DECODE_TIERS, DEFAULT_TARGET_FLUIDITY
from exporter.stats.prefill import PrefillModel, fit_prefill_model

PROFILE_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
SCHEDULING_SLACK_S = 0.25  # time a prompt may wait in the queue before its first token is late


@dataclasses.dataclass(frozen=True)
class Workload:
    """A seeded open-loop workload: Poisson arrivals, lognormal prompt and output lengths."""

    requests: int
    rate: float
    seed: int

    def arrivals(self) -> list[tuple[float, SimRequest]]:
        rng = np.random.default_rng(self.seed)
        times = np.cumsum(rng.exponential(1.0 / self.rate, self.requests))
        prompts = np.clip(rng.lognormal(np.log(1500), 0.9, self.requests), 64, 7000).astype(int)
        outputs = np.clip(rng.lognormal(np.log(200), 0.7, self.requests), 16, 1000).astype(int)
        return [
            (float(at), SimRequest(int(p), int(o), "length", float(at), seed=i))
            for i, (at, p, o) in enumerate(zip(times, prompts, outputs, strict=True))
        ]


def simulate(preset: Preset, chunked: bool, workload: Workload) -> IntervalBatch:
    """Per-token intervals of every request served by the engine model on a virtual clock."""
    arrivals = workload.arrivals()  # fresh requests: the engine keeps its state on them
    engine = Engine(dataclasses.replace(preset.engine, chunked_prefill=chunked), preset.cost)
    emitted: dict[SimRequest, list[tuple[float, int]]] = defaultdict(list)
    run_virtual(engine, arrivals, lambda at, e: emitted[e.request].append((at, e.tokens)))
    return IntervalBatch.from_sequences(
        intervals_from_stamps(r.arrival, [at for at, _ in emitted[r]], [k for _, k in emitted[r]])
        for _, r in arrivals
    )


def profile_prefill(preset: Preset) -> PrefillModel:
    """Etalon's prefill profiling: each prompt length alone on the engine, TTFT against length."""
    ttfts = [isolated_ttft(preset, length) for length in PROFILE_LENGTHS]
    return fit_prefill_model(PROFILE_LENGTHS, ttfts)


def report(batch: IntervalBatch, prompts: np.ndarray, model: PrefillModel) -> dict[str, str]:
    """The figures of one run, formatted for the table."""
    latency = latency_batch(batch)
    prefill_deadlines = model.deadline(prompts.astype(np.float64), SCHEDULING_SLACK_S)
    rows = {
        "TTFT p50 / p99 (s)": _pair(latency.ttft, 50, 99, "{:.3f}"),
        "TBT p50 / p99 (ms)": _pair(latency.tbt * 1e3, 50, 99, "{:.1f}"),
        "TPOT p50 / p99 (ms)": _pair(latency.tpot * 1e3, 50, 99, "{:.1f}"),
        "longest stall p99 (s)": f"{percentile(latency.max_tbt, 99):.3f}",
    }
    for tier, deadline in DECODE_TIERS.items():
        result = evaluate(batch, prefill_deadlines, deadline)
        share = float(np.mean(result.fluidity >= DEFAULT_TARGET_FLUIDITY)) * 100
        level = "-" if result.service_level is None else f"{result.service_level:.3f}"  # as the bench tables
        rows[f"fluidity {tier} ({deadline * 1e3:.0f} ms): level / >={DEFAULT_TARGET_FLUIDITY:g}"] = (
            f"{level} / {share:.0f}%"
        )
    rows["fluid token rate (tok/s)"] = f"{fluid_token_rate(batch):.1f}"
    rows["TPOT-based rate p50 (tok/s)"] = f"{decode_rate_from_tpot(latency.tpot, 50):.1f}"
    rows["TBT-based rate p99 (tok/s)"] = f"{decode_rate_from_tbt(latency.tbt, 99):.1f}"
    return rows


def _pair(values: np.ndarray, low: float, high: float, fmt: str) -> str:
    return f"{fmt.format(percentile(values, low))} / {fmt.format(percentile(values, high))}"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The demo's table: one column of figures per prefill mode, and the profiled prefill model."""

    columns: dict[str, dict[str, str]]
    model: PrefillModel


def compare_prefill_modes(preset: Preset, workload: Workload) -> Comparison:
    """The workload served with whole prefills and with chunked prefills, the figures side by side."""
    prompts = np.array([request.prompt_len for _, request in workload.arrivals()])
    model = profile_prefill(preset)
    columns = {
        name: report(simulate(preset, chunked, workload), prompts, model)
        for name, chunked in (("whole prefills", False), ("chunked prefills", True))
    }
    return Comparison(columns, model)
