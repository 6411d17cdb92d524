"""Step-time cost model of one engine iteration: a pure function of the batch's shape.

An iteration runs every scheduled decode (one token each, more with speculative decoding) plus prefill
chunks. Its time is the sum of:

* ``step_overhead_s``: the memory-bound floor paid by every step, dominated by reading all weights once
  (weights bytes / HBM bandwidth) plus launch and scheduling overhead;
* ``per_seq_s`` per sequence in the batch: sampling, detokenization, bookkeeping;
* ``kv_read_per_token_s`` per context token of every decode: decode attention reads the whole KV cache of
  its sequence, a memory-bound cost (KV bytes per token / HBM bandwidth);
* ``prefill_per_token_s`` per prefill token (and per speculative token verified): the compute-bound GEMMs,
  about 2 x parameters FLOPs per token / achieved FLOP/s;
* ``attn_per_pair_s`` per (query, key) pair of prefill attention: a chunk of ``c`` tokens after ``p``
  already-computed tokens costs ``c*p + c*(c+1)/2`` pairs, so one prefill grows quadratically with prompt
  length while a chunked one pays the same pairs spread over several steps.

A sum, not a roofline max, is what linear step-time predictors such as Vidur and Sarathi-Serve's profiling
fit; it is simple, monotone in every input and easy to reason about in tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """Named coefficients of the step-time model (seconds)."""

    step_overhead_s: float
    per_seq_s: float
    kv_read_per_token_s: float
    prefill_per_token_s: float
    attn_per_pair_s: float


@dataclass(frozen=True)
class StepShape:
    """What one iteration computes, as the cost model sees it."""

    decode_seqs: int = 0
    decode_context_tokens: int = 0
    spec_tokens: int = 0
    prefill_chunks: tuple[tuple[int, int], ...] = ()  # (tokens already computed, chunk length)


def attention_pairs(computed: int, chunk: int) -> int:
    """Query-key pairs of a causal prefill chunk of ``chunk`` tokens after ``computed`` tokens."""
    return chunk * computed + chunk * (chunk + 1) // 2


def step_time(cost: CostModel, shape: StepShape) -> float:
    """Seconds one iteration of ``shape`` takes under ``cost``."""
    prefill_tokens = sum(chunk for _, chunk in shape.prefill_chunks)
    pairs = sum(attention_pairs(done, chunk) for done, chunk in shape.prefill_chunks)
    seqs = shape.decode_seqs + len(shape.prefill_chunks)
    return (
        cost.step_overhead_s
        + cost.per_seq_s * seqs
        + cost.kv_read_per_token_s * shape.decode_context_tokens
        + cost.prefill_per_token_s * (prefill_tokens + shape.spec_tokens)
        + cost.attn_per_pair_s * pairs
    )
