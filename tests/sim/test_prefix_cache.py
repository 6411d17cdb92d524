"""The simulator's prefix cache: hash chains, LRU eviction, and a follow-up turn's TTFT lower than a cold
prompt's of the same length by exactly what the cost model says the skipped prefill costs."""

from __future__ import annotations

import pytest

from exporter.sim import tokenizer
from exporter.sim.costmodel import CostModel, StepShape, step_time
from exporter.sim.engine import Emission, Engine, EngineParams, SimRequest, run_virtual
from exporter.sim.prefix_cache import PrefixCache, block_hashes

COST = CostModel(
    step_overhead_s=0.002,
    per_seq_s=1e-5,
    kv_read_per_token_s=5e-9,
    prefill_per_token_s=2e-5,
    attn_per_pair_s=2e-9,
)
PARAMS = EngineParams(
    max_num_seqs=8,
    max_num_batched_tokens=4096,
    num_kv_blocks=1000,
    block_size=16,
    max_model_len=8192,
    chunked_prefill=True,
)


def test_block_hashes_chain_the_whole_prefix() -> None:
    a = block_hashes(list(range(40)), 16)
    b = block_hashes([99, *range(1, 40)], 16)
    assert len(a) == 2  # the partial third block has no hash
    assert a[0] != b[0] and a[1] != b[1]  # the same second block after another first one differs
    assert block_hashes(list(range(40)), 16) == a


def test_lru_evicts_the_least_recently_used_blocks() -> None:
    cache = PrefixCache(capacity=3)
    cache.insert([1, 2, 3])
    assert cache.match([1, 2]) == 2  # 1 and 2 are now the most recently used
    cache.insert([4])
    assert len(cache) == 3 and cache.match([3]) == 0 and cache.match([1, 2, 4]) == 3
    assert cache.match([2, 1]) == 2 and cache.match([5, 1]) == 0  # a miss stops the match


def _ids(n: int, seed: int) -> tuple[int, ...]:
    return tuple(tokenizer.generated_token_id(seed, i) for i in range(n))


def _ttft(engine: Engine, request: SimRequest) -> float:
    first: list[float] = []

    def on_emission(at: float, emission: Emission) -> None:
        if emission.first:
            first.append(at)

    end = run_virtual(engine, [(0.0, request)], on_emission)
    assert end >= first[0]
    return first[0]


def _request(ids: tuple[int, ...], output: int, seed: int) -> SimRequest:
    return SimRequest(len(ids), output, "length", 0.0, seed, prompt_ids=ids)


@pytest.mark.parametrize("chunked", [True, False])
def test_a_follow_up_turn_skips_the_cached_prefill_by_the_cost_models_amount(chunked: bool) -> None:
    params = PARAMS if chunked else PARAMS.__class__(**{**PARAMS.__dict__, "chunked_prefill": False})
    engine = Engine(params, COST)
    first = _request(_ids(300, seed=1), output=20, seed=7)
    _ttft(engine, first)
    # The next turn: the whole first prompt, the answer exactly as generated, and a new message.
    answer = tuple(tokenizer.generated_token_id(7, i) for i in range(20))
    follow_up = _request(first.prompt_ids + answer + _ids(50, seed=2), output=5, seed=8)
    warm = _ttft(engine, follow_up)
    cached = (320 // 16) * 16
    assert follow_up.cached_tokens == cached
    assert warm == pytest.approx(step_time(COST, StepShape(prefill_chunks=((cached, 370 - cached),))))
    cold = _ttft(Engine(params, COST), _request(_ids(370, seed=3), output=5, seed=9))
    assert cold == pytest.approx(step_time(COST, StepShape(prefill_chunks=((0, 370),))))
    saved = COST.prefill_per_token_s * cached + COST.attn_per_pair_s * (
        370 * 371 // 2 - (50 * cached + 50 * 51 // 2)
    )
    assert cold - warm == pytest.approx(saved)
    assert (engine.cache_queries, engine.cache_hits) == (300 + 370, cached)


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    engine = Engine(PARAMS, COST)
    ids = _ids(64, seed=4)
    _ttft(engine, _request(ids, output=1, seed=1))
    again = _request(ids, output=1, seed=2)
    _ttft(engine, again)
    assert again.cached_tokens == 63


def test_prefix_caching_off_and_requests_without_ids_never_hit() -> None:
    off = Engine(PARAMS.__class__(**{**PARAMS.__dict__, "prefix_caching": False}), COST)
    ids = _ids(64, seed=5)
    for seed in (1, 2):
        request = _request(ids, output=1, seed=seed)
        _ttft(off, request)
        assert request.cached_tokens == 0
    engine = Engine(PARAMS, COST)
    for seed in (1, 2):
        request = SimRequest(64, 1, "length", 0.0, seed)
        _ttft(engine, request)
        assert request.cached_tokens == 0 and engine.cache_queries == 0
