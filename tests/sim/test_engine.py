"""The scheduler on a virtual clock: batching, budgets, KV, preemption, chunked prefill, spec decode."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict

import pytest

from exporter.sim.costmodel import CostModel
from exporter.sim.engine import Emission, Engine, EngineParams, SimRequest, run_virtual

COST = CostModel(
    step_overhead_s=0.010,
    per_seq_s=0.0,
    kv_read_per_token_s=0.0,
    prefill_per_token_s=0.0001,
    attn_per_pair_s=0.0,
)
PARAMS = EngineParams(
    max_num_seqs=8,
    max_num_batched_tokens=256,
    num_kv_blocks=1000,
    block_size=16,
    max_model_len=8192,
    chunked_prefill=True,
)


def request(prompt: int, output: int, arrival: float = 0.0, seed: int = 0) -> SimRequest:
    return SimRequest(
        prompt_len=prompt, output_limit=output, finish_reason="length", arrival=arrival, seed=seed
    )


class Trace:
    """Token arrival times per request from a virtual run."""

    def __init__(self) -> None:
        self.times: dict[SimRequest, list[tuple[float, int]]] = defaultdict(list)
        self.finished: list[SimRequest] = []

    def __call__(self, at: float, emission: Emission) -> None:
        self.times[emission.request].append((at, emission.tokens))
        if emission.finished:
            self.finished.append(emission.request)

    def max_gap(self, req: SimRequest) -> float:
        stamps = [t for t, _ in self.times[req]]
        return max(b - a for a, b in itertools.pairwise(stamps))


def run(params: EngineParams, arrivals: list[tuple[float, SimRequest]], cost: CostModel = COST) -> Trace:
    trace = Trace()
    run_virtual(Engine(params, cost), arrivals, trace)
    return trace


def test_every_request_gets_exactly_its_tokens() -> None:
    reqs = [request(100 + 10 * i, 5 + i, arrival=0.003 * i) for i in range(20)]
    trace = run(PARAMS, [(r.arrival, r) for r in reqs])
    assert set(trace.finished) == set(reqs)
    for r in reqs:
        assert sum(n for _, n in trace.times[r]) == r.output_limit


def test_single_request_decodes_one_token_per_step() -> None:
    r = request(64, 10)
    trace = run(PARAMS, [(0.0, r)])
    first, *rest = [t for t, _ in trace.times[r]]
    assert first == pytest.approx(0.010 + 64 * 0.0001)
    assert all(g == pytest.approx(0.010) for g in [b - a for a, b in zip([first, *rest], rest, strict=False)])


def test_continuous_batching_lets_a_late_request_join_running_decodes() -> None:
    early, late = request(16, 50), request(16, 5, arrival=0.105)
    trace = run(PARAMS, [(0.0, early), (late.arrival, late)])
    late_first = trace.times[late][0][0]
    # It joins at the next step boundary instead of waiting for the early request to finish.
    assert late_first < trace.times[early][-1][0]
    assert late_first - late.arrival < 0.03


def test_batch_never_exceeds_max_num_seqs() -> None:
    engine = Engine(PARAMS, COST)
    for i in range(20):
        engine.submit(request(16, 30, seed=i))
    batch = engine.schedule(0.0)
    assert batch is not None
    assert len(batch.decodes) + len(batch.prefills) == PARAMS.max_num_seqs
    assert len(engine.waiting) == 20 - PARAMS.max_num_seqs


def test_token_budget_caps_prefill_work_per_step() -> None:
    engine = Engine(PARAMS, COST)
    engine.submit(request(1000, 3))
    batch = engine.schedule(0.0)
    assert batch is not None
    assert sum(chunk for _, chunk in batch.prefills) == PARAMS.max_num_batched_tokens


def test_requests_queue_when_kv_cache_is_full() -> None:
    params = dataclasses.replace(PARAMS, num_kv_blocks=20)  # 320 tokens of KV
    engine = Engine(params, COST)
    for _ in range(3):
        engine.submit(request(200, 4))  # 13 blocks each: only one fits
    engine.schedule(0.0)
    assert len(engine.running) == 1 and len(engine.waiting) == 2
    assert engine.kv_usage > 0.45


def test_preemption_recomputes_when_decodes_outgrow_the_cache() -> None:
    params = dataclasses.replace(PARAMS, num_kv_blocks=12)  # 192 tokens for two growing requests
    engine = Engine(params, COST)
    a, b = request(40, 100), request(40, 100, seed=1)
    trace = Trace()
    run_virtual(engine, [(0.0, a), (0.0, b)], trace)
    assert engine.num_preemptions >= 1
    assert set(trace.finished) == {a, b}
    assert sum(n for _, n in trace.times[b]) == 100  # recompute does not lose or repeat tokens


def test_queue_limit_rejects_with_a_callback() -> None:
    params = dataclasses.replace(PARAMS, max_waiting=2)
    rejected: list[SimRequest] = []
    run_virtual(
        Engine(params, COST),
        [(0.0, request(16, 2, seed=i)) for i in range(5)],
        Trace(),
        lambda _, r: rejected.append(r),
    )
    assert len(rejected) == 3


def _stall_workload() -> list[tuple[float, SimRequest]]:
    decoders = [(0.0, request(32, 120, seed=i)) for i in range(4)]
    long_prompts = [(0.2 + 0.1 * i, request(3000, 4, arrival=0.2 + 0.1 * i, seed=10 + i)) for i in range(3)]
    return decoders + long_prompts


def test_chunked_prefill_reduces_the_longest_decode_stall() -> None:
    whole = dataclasses.replace(PARAMS, chunked_prefill=False, max_num_batched_tokens=8192)
    arrivals = _stall_workload()
    trace = run(whole, arrivals)
    stall_whole = max(trace.max_gap(r) for _, r in arrivals[:4])
    arrivals = _stall_workload()
    trace = run(PARAMS, arrivals)
    stall_chunked = max(trace.max_gap(r) for _, r in arrivals[:4])
    # Whole: a 3000-token prefill (0.31 s) stalls every decode; chunked: at most ~one 256-token chunk.
    assert stall_whole > 0.3
    assert stall_chunked < 0.05
    assert stall_chunked < stall_whole / 5


def test_speculative_decoding_emits_several_tokens_per_chunk() -> None:
    params = dataclasses.replace(PARAMS, spec_k=4, spec_acceptance=0.8)
    r = request(16, 400)
    trace = run(params, [(0.0, r)])
    sizes = [n for _, n in trace.times[r]]
    assert sum(sizes) == 400 and max(sizes) == 5
    # Expected tokens per step with k=4, a=0.8: 1 + a + a^2 + a^3 + a^4 = 3.36.
    assert 2.8 < sum(sizes[1:-1]) / len(sizes[1:-1]) < 3.9


def test_same_inputs_give_the_same_timeline() -> None:
    def timeline() -> list[tuple[float, int]]:
        reqs = [request(50 + i, 10, arrival=0.01 * i, seed=i) for i in range(10)]
        trace = run(
            dataclasses.replace(PARAMS, spec_k=2, spec_acceptance=0.5), [(r.arrival, r) for r in reqs]
        )
        return [x for r in reqs for x in trace.times[r]]

    assert timeline() == timeline()


def test_abort_frees_kv_blocks() -> None:
    engine = Engine(PARAMS, COST)
    r = request(500, 10)
    engine.submit(r)
    engine.schedule(0.0)
    assert engine.free_blocks < PARAMS.num_kv_blocks
    engine.abort(r)
    assert engine.free_blocks == PARAMS.num_kv_blocks and engine.idle
