"""The step-time model: memory-bound decode, superlinear prefill, chunking conserves attention work."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.sim.costmodel import CostModel, StepShape, attention_pairs, step_time
from exporter.sim.engine_presets import PRESETS

COST = PRESETS["llama-3.1-8b-h100"].cost


def test_empty_step_costs_the_overhead() -> None:
    assert step_time(COST, StepShape()) == COST.step_overhead_s


def test_decode_grows_with_batch_and_context() -> None:
    small = step_time(COST, StepShape(decode_seqs=1, decode_context_tokens=1000))
    wider = step_time(COST, StepShape(decode_seqs=64, decode_context_tokens=1000))
    longer = step_time(COST, StepShape(decode_seqs=1, decode_context_tokens=100_000))
    assert small < wider and small < longer


def test_prefill_time_per_token_grows_with_prompt_length() -> None:
    def per_token(n: int) -> float:
        fixed = COST.step_overhead_s + COST.per_seq_s
        return (step_time(COST, StepShape(prefill_chunks=((0, n),))) - fixed) / n

    assert per_token(512) < per_token(4096) < per_token(8192)


@given(st.integers(min_value=1, max_value=20_000), st.integers(min_value=1, max_value=4096))
def test_chunked_attention_pairs_sum_to_the_whole_prefill(prompt: int, chunk: int) -> None:
    done, pairs = 0, 0
    while done < prompt:
        size = min(chunk, prompt - done)
        pairs += attention_pairs(done, size)
        done += size
    assert pairs == attention_pairs(0, prompt) == prompt * (prompt + 1) // 2


def test_presets_decode_at_published_order_of_magnitude() -> None:
    # Llama-3-8B on one H100 decodes at roughly 6-10 ms per token at small batch (vLLM benchmarks).
    step = step_time(COST, StepShape(decode_seqs=8, decode_context_tokens=8 * 1000))
    assert 0.005 < step < 0.012
    for preset in PRESETS.values():
        assert isinstance(preset.cost, CostModel)
        assert preset.engine.max_num_batched_tokens >= 1
