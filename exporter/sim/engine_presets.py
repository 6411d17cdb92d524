"""Model/GPU presets: cost-model coefficients and capacity, calibrated to public figures.

Every number below is an estimate from roofline arithmetic on public specifications, not a measurement
of a real deployment; they land within the range of published serving figures, which is what a
simulator needs (realistic shapes: memory-bound decode, superlinear prefill, KV-bounded concurrency).

Sources:

* GPUs: NVIDIA H100 SXM datasheet (3.35 TB/s HBM3, 989 dense BF16 TFLOP/s); A100 80GB SXM datasheet
  (2.0 TB/s, 312 dense BF16 TFLOP/s). Achieved fractions assumed: ~60% of peak FLOP/s for prefill GEMMs,
  ~40% for attention, ~85% of bandwidth for weight reads.
* Models (Hugging Face ``config.json``): Llama-3.1-8B has 32 layers, 8 KV heads of 128 dims (128 KiB of
  BF16 KV per token), ~8.0B parameters; Llama-3.1-70B has 80 layers, 8 KV heads of 128 dims (320 KiB per
  token), ~70.6B parameters; Mistral-7B-v0.1 has 32 layers, 8 KV heads (128 KiB per token), ~7.2B.
* Derivations: ``step_overhead_s`` = weight bytes / (bandwidth x 0.85) plus ~0.5-1 ms launch and
  scheduling (plus all-reduce for tensor parallelism); ``kv_read_per_token_s`` = KV bytes per token /
  bandwidth; ``prefill_per_token_s`` = 2 x params FLOPs / achieved FLOP/s; ``attn_per_pair_s`` =
  4 x layers x hidden FLOPs / achieved FLOP/s. KV blocks: (0.9 x GPU memory - weights - ~4 GB activations)
  / KV bytes per token / 16-token blocks.
* Sanity checks against published numbers: Llama-3-8B on one H100 decodes at ~6-8 ms per token at small
  batch in vLLM's own benchmarks (here 6.2 ms + batch terms); Sarathi-Serve (Agrawal et al., OSDI 2024)
  reports Mistral-7B on one A100 and uses token budgets of 512-2048 for chunked prefill; Etalon (Agrawal
  et al., 2024, "Etalon: Holistic Performance Evaluation Framework for LLM Inference Systems") shows
  vLLM's whole-prompt prefills stalling decodes for hundreds of milliseconds with long prompts, which the
  8B preset reproduces for prompts of several thousand tokens.

``tiny`` is not a real model: it is fast (about 2 ms per step) so that tests finish quickly, with a
prefill cost large enough that chunking visibly matters for long prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.sim.costmodel import CostModel
from exporter.sim.engine import Engine, EngineParams, SimRequest, run_virtual


@dataclass(frozen=True)
class Preset:
    """A served model name, its cost model and its engine capacity."""

    model: str
    cost: CostModel
    engine: EngineParams
    description: str


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        model="sim-tiny",
        cost=CostModel(
            step_overhead_s=2.0e-3,
            per_seq_s=10e-6,
            kv_read_per_token_s=5e-9,
            prefill_per_token_s=2.0e-6,
            attn_per_pair_s=2e-10,
        ),
        engine=EngineParams(
            max_num_seqs=64,
            max_num_batched_tokens=512,
            num_kv_blocks=2048,
            block_size=16,
            max_model_len=8192,
            chunked_prefill=True,
        ),
        description="fast toy model for tests (~2 ms per step)",
    ),
    "llama-3.1-8b-h100": Preset(
        model="meta-llama/Llama-3.1-8B-Instruct",
        cost=CostModel(
            step_overhead_s=6.2e-3,  # 16 GB / (3.35 TB/s x 0.85) = 5.6 ms + 0.6 ms launch
            per_seq_s=15e-6,
            kv_read_per_token_s=3.9e-8,  # 128 KiB / 3.35 TB/s
            prefill_per_token_s=2.7e-5,  # 16 GFLOP / (989 TFLOP/s x 0.6)
            attn_per_pair_s=1.3e-12,  # 4 x 32 x 4096 FLOP / (989 TFLOP/s x 0.4)
        ),
        engine=EngineParams(
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            num_kv_blocks=26_000,  # (72 - 16 - 4) GB / 128 KiB / 16
            block_size=16,
            max_model_len=8192,
            chunked_prefill=True,
        ),
        description="Llama-3.1-8B on one H100 SXM (estimates)",
    ),
    "llama-3.1-70b-4xh100": Preset(
        model="meta-llama/Llama-3.1-70B-Instruct",
        cost=CostModel(
            step_overhead_s=14e-3,  # 141 GB / (4 x 3.35 TB/s x 0.85) = 12.4 ms + all-reduce and launch
            per_seq_s=20e-6,
            kv_read_per_token_s=2.4e-8,  # 320 KiB split over 4 GPUs / 3.35 TB/s
            prefill_per_token_s=7.1e-5,  # 141 GFLOP / (4 x 989 TFLOP/s x 0.5, TP efficiency)
            attn_per_pair_s=1.7e-12,  # 4 x 80 x 8192 FLOP / (4 x 989 TFLOP/s x 0.4)
        ),
        engine=EngineParams(
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            num_kv_blocks=27_000,  # (4 x 72 - 141 - 16) GB / 320 KiB / 16
            block_size=16,
            max_model_len=8192,
            chunked_prefill=True,
        ),
        description="Llama-3.1-70B, tensor-parallel on 4 H100 SXM (estimates)",
    ),
    "mistral-7b-a100": Preset(
        model="mistralai/Mistral-7B-v0.1",
        cost=CostModel(
            step_overhead_s=9.0e-3,  # 14.5 GB / (2.0 TB/s x 0.85) = 8.5 ms + launch
            per_seq_s=15e-6,
            kv_read_per_token_s=6.5e-8,  # 128 KiB / 2.0 TB/s
            prefill_per_token_s=7.7e-5,  # 14.5 GFLOP / (312 TFLOP/s x 0.6)
            attn_per_pair_s=4.2e-12,  # 4 x 32 x 4096 FLOP / (312 TFLOP/s x 0.4)
        ),
        engine=EngineParams(
            max_num_seqs=128,
            max_num_batched_tokens=512,  # Sarathi-Serve's strict-SLO token budget
            num_kv_blocks=26_000,
            block_size=16,
            max_model_len=8192,
            chunked_prefill=True,
        ),
        description="Mistral-7B on one A100 80GB, Sarathi-Serve's setup (estimates)",
    ),
}


def isolated_ttft(preset: Preset, prompt_tokens: int) -> float:
    """The modelled time to first token of one request alone on the engine (the truth that prefill
    profiling should recover), on a virtual clock."""
    first: list[float] = []
    request = SimRequest(prompt_tokens, 1, "length", 0.0)
    run_virtual(Engine(preset.engine, preset.cost), [(0.0, request)], lambda at, _: first.append(at))
    return first[0]
