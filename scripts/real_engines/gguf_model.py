"""Write a random-weight Llama-architecture GGUF model for llama.cpp: no download, any size.

Run by the set-up with the ``gguf`` package of the same llama.cpp sources on ``PYTHONPATH``::

    python gguf_model.py --vocab models/ggml-vocab-phi-3.gguf --out tiny.gguf --embd 256 --layers 4

The tokenizer (every ``tokenizer.*`` key, chat template included) is copied from a vocab-only GGUF, so
prompts tokenise as they would for the real model family; the weights are N(0, 0.02) noise, so the text
is gibberish, which is all a latency probe needs (the probe asks for ``ignore_eos``). Matrices are f16
(what llama.cpp runs fastest on a CPU without quantising), norms f32.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

ARCH = "llama"


def copy_tokenizer(reader: GGUFReader, writer: GGUFWriter) -> int:
    """Copy every ``tokenizer.*`` key; returns the vocabulary size."""
    vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value: Any = field.contents()
        sub_type = field.types[1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type)
        if key == "tokenizer.ggml.tokens":
            vocab = len(value)
    if vocab == 0:
        raise SystemExit("the vocab file has no tokenizer.ggml.tokens")
    return vocab


def add_hparams(writer: GGUFWriter, embd: int, layers: int, heads: int, context: int) -> None:
    writer.add_name(f"random-llama-{embd}x{layers}")
    writer.add_context_length(context)
    writer.add_embedding_length(embd)
    writer.add_feed_forward_length(3 * embd)
    writer.add_block_count(layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(embd // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1)  # mostly f16


def add_weights(writer: GGUFWriter, vocab: int, embd: int, layers: int, seed: int) -> None:
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray[Any, Any]:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def norm() -> np.ndarray[Any, Any]:
        return np.ones(embd, dtype=np.float32)

    ffn = 3 * embd
    writer.add_tensor("token_embd.weight", matrix(vocab, embd))
    for i in range(layers):
        block = f"blk.{i}"
        writer.add_tensor(f"{block}.attn_norm.weight", norm())
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", matrix(embd, embd))
        writer.add_tensor(f"{block}.ffn_norm.weight", norm())
        writer.add_tensor(f"{block}.ffn_gate.weight", matrix(ffn, embd))
        writer.add_tensor(f"{block}.ffn_up.weight", matrix(ffn, embd))
        writer.add_tensor(f"{block}.ffn_down.weight", matrix(embd, ffn))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("output.weight", matrix(vocab, embd))


def write_model(vocab_file: Path, out: Path, embd: int, layers: int, heads: int, context: int) -> None:
    """Write the model to ``out`` (through a temporary file, so a half-written model never exists)."""
    reader = GGUFReader(vocab_file)
    tmp = out.with_name(out.name + ".tmp")
    writer = GGUFWriter(tmp, ARCH)
    vocab = copy_tokenizer(reader, writer)
    add_hparams(writer, embd, layers, heads, context)
    add_weights(writer, vocab, embd, layers, seed=embd * 1000 + layers)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, required=True, help="a vocab-only GGUF file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--embd", type=int, default=256, help="hidden size")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args()
    write_model(args.vocab, args.out, args.embd, args.layers, args.heads, args.context)


if __name__ == "__main__":
    main()
