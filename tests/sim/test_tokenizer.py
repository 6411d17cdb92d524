"""The tokenizer is deterministic and exact: round trips, exact prompt lengths, generated ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.sim import tokenizer


@given(st.text())
def test_decode_encode_round_trips_any_text(text: str) -> None:
    ids = tokenizer.encode(text)
    assert all(0 <= i < tokenizer.VOCAB_SIZE for i in ids)
    # Lone surrogates cannot be encoded as UTF-8 by anyone; everything else comes back unchanged.
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert tokenizer.decode(ids) == text


@given(st.integers(min_value=0, max_value=2000), st.integers(min_value=0, max_value=2**32))
def test_prompt_of_length_is_exactly_that_many_tokens(n: int, seed: int) -> None:
    assert len(tokenizer.encode(tokenizer.prompt_of_length(n, seed))) == n


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=500))
def test_generated_tokens_encode_back_to_themselves(seed: int, n: int) -> None:
    ids = [tokenizer.generated_token_id(seed, i) for i in range(n)]
    text = tokenizer.decode(ids)
    assert tokenizer.encode(text) == ids
    assert len(text) == 4 * n  # " xyz" per token: a client can count tokens from text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), (" abc", 1), (" hello", 2), ("Hi!", 3), ("é", 2), ("a b", 2)],
)
def test_token_counts_of_simple_texts(text: str, expected: int) -> None:
    assert len(tokenizer.encode(text)) == expected


def test_chat_template_count_matches_rendered_encoding() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    rendered = tokenizer.render_chat(messages)
    assert rendered == "<|system|>be brief\n<|user|>hi\n<|assistant|>"
    assert tokenizer.count_chat_tokens(messages) == len(tokenizer.encode(rendered))


def test_out_of_vocabulary_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="outside vocabulary"):
        tokenizer.decode([tokenizer.VOCAB_SIZE])
