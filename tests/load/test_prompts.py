"""Prompt builders: exact lengths for the simulator's tokenizer, unique prefixes, approximate words."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.load.prompts import WORDS, ApproxPromptBuilder, SimPromptBuilder, chat_overhead
from exporter.sim import tokenizer

lengths = st.integers(0, 3000)
keys = st.integers(0, 2**45)


@settings(max_examples=200, deadline=None)
@given(lengths, keys, st.integers(0, 5))
def test_sim_text_prompts_are_exact(n: int, key: int, seed: int) -> None:
    text, intended = SimPromptBuilder(seed).text(n, key)
    assert intended == n
    assert len(tokenizer.encode(text)) == n


@settings(max_examples=200, deadline=None)
@given(lengths, keys)
def test_sim_chat_prompts_are_exact_above_the_template(n: int, key: int) -> None:
    messages, intended = SimPromptBuilder().chat(n, key)
    counted = tokenizer.count_chat_tokens([{"role": r, "content": c} for r, c in messages])
    assert counted == intended
    assert intended == max(n, chat_overhead() + 1)


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 500), st.lists(keys, min_size=2, max_size=20, unique=True))
def test_distinct_keys_give_distinct_prefixes(n: int, many: list[int]) -> None:
    builder = SimPromptBuilder()
    # The first three tokens differ for distinct keys below 26**9: a server's prefix cache never hits.
    prefixes = {builder.text(n, k % 26**9)[0][:12] for k in many}
    assert len(prefixes) == len({k % 26**9 for k in many})


def test_long_prompts_extend_the_base_consistently() -> None:
    builder = SimPromptBuilder(seed=1)
    short = builder.text(10, 5)[0]
    long = builder.text(20_000, 5)[0]
    assert len(tokenizer.encode(long)) == 20_000
    assert builder.text(10, 5)[0] == short


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3000), keys, st.sampled_from([1.0, 1.3, 0.8]))
def test_approximate_prompts_have_the_right_word_count(n: int, key: int, ratio: float) -> None:
    builder = ApproxPromptBuilder(tokens_per_word=ratio)
    text, intended = builder.text(n, key)
    words = text.split()
    assert intended == n
    assert len(words) == round(n / ratio)
    assert set(words) <= set(WORDS)
    assert not builder.exact


def test_approximate_chat_is_one_user_message() -> None:
    messages, intended = ApproxPromptBuilder().chat(50, 7)
    assert intended == 50
    assert [role for role, _ in messages] == ["user"]
    assert len(messages[0][1].split()) == 50
