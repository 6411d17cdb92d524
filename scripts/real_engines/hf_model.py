"""Write a random-weight ``LlamaForCausalLM`` in Hugging Face layout for vLLM: no download, any size.

Run by the set-up with the vLLM environment's Python (it needs ``torch`` and ``transformers``)::

    python hf_model.py --vocab vocab-phi-3.gguf --out model/ --hidden 256 --layers 4

The tokenizer is converted by ``transformers`` from the same vocab-only GGUF that the llama.cpp models
carry, so both engines split a prompt into the same tokens. Weights are float32 (vLLM's CPU backend
runs float32 everywhere; bfloat16 needs AVX-512).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM


def write_tokenizer(vocab: Path, out: Path) -> tuple[int, int, int]:
    """Convert and save the tokenizer; returns (vocabulary size, BOS id, EOS id)."""
    tokenizer = AutoTokenizer.from_pretrained(str(vocab.parent), gguf_file=vocab.name)
    tokenizer.save_pretrained(str(out))
    return len(tokenizer), int(tokenizer.bos_token_id), int(tokenizer.eos_token_id)


def write_model(vocab: Path, out: Path, hidden: int, layers: int, heads: int, context: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    size, bos, eos = write_tokenizer(vocab, out)
    config = LlamaConfig(
        vocab_size=size,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=context,
        bos_token_id=bos,
        eos_token_id=eos,
        torch_dtype="float32",
    )
    torch.manual_seed(hidden * 1000 + layers)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out), safe_serialization=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, required=True, help="a vocab-only GGUF file")
    parser.add_argument("--out", type=Path, required=True, help="the model folder")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args()
    write_model(args.vocab, args.out, args.hidden, args.layers, args.heads, args.context)


if __name__ == "__main__":
    main()
