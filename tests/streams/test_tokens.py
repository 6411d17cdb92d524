"""Token counting per chunk: source choice, and the reconciliation rule with its stated error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.streams.openai import Chunk
from exporter.streams.result import TokenSource
from exporter.streams.tokens import TokenCounter, load_tokenizer, reconcile, spread


@pytest.mark.parametrize(
    ("counts", "reported", "expected", "adjustment"),
    [
        ([1, 1, 1, 1], 8, [2, 2, 2, 2], 4),  # constant chunk size: the spread is exact
        ([1, 1, 1, 1], 6, [1, 2, 1, 2], 2),
        ([1, 1, 1], 3, [1, 1, 1], 0),
        ([1, 1, 1], 2, [1, 1, 1], 0),  # never below one token per chunk
        ([3, 1, 5], 6, [2, 1, 3], -3),  # the excess is taken in proportion
        ([], 5, [], 0),
    ],
)
def test_reconcile_table(counts: list[int], reported: int, expected: list[int], adjustment: int) -> None:
    assert reconcile(counts, reported) == (expected, adjustment)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=50), st.integers(0, 400))
def test_reconcile_properties(counts: list[int], reported: int) -> None:
    adjusted, adjustment = reconcile(counts, reported)
    assert all(c >= 1 for c in adjusted)
    assert sum(adjusted) == sum(counts) + adjustment
    if reported >= len(counts):
        assert sum(adjusted) == reported  # exact whenever it can be
    # The stated error bound: tokens moved between chunks never exceed |U - S|.
    assert sum(abs(a - c) for a, c in zip(adjusted, counts, strict=True)) == abs(adjustment)


@given(st.integers(0, 1000), st.lists(st.integers(0, 9), min_size=1, max_size=30))
def test_spread_sums_and_stays_within_one_of_proportion(amount: int, weights: list[int]) -> None:
    shares = spread(amount, weights)
    total = sum(weights)
    assert sum(shares) == (amount if total else 0)
    for share, weight in zip(shares, weights, strict=True):
        exact = amount * weight / total if total else 0
        assert abs(share - exact) < 1 + 1e-9


def test_source_is_chosen_on_the_first_content_chunk_best_first() -> None:
    counter = TokenCounter()
    assert counter.count(Chunk(" a", token_ids=3, completion_tokens=3)) == 3
    assert counter.source is TokenSource.TOKEN_IDS
    usage = TokenCounter()
    assert [usage.count(Chunk(" a", completion_tokens=n)) for n in (2, 5, 6)] == [2, 3, 1]
    assert usage.source is TokenSource.CONTINUOUS_USAGE
    by_text = TokenCounter(lambda text: len(text.split()))
    assert by_text.count(Chunk(" a b c")) == 3
    assert by_text.source is TokenSource.TOKENIZER
    plain = TokenCounter()
    assert plain.count(Chunk(" a b c")) == 1
    assert plain.source is TokenSource.CHUNKS and plain.needs_reconciling()


def test_a_chunk_missing_the_chosen_field_falls_back_and_is_reconciled() -> None:
    counter = TokenCounter()
    counter.count(Chunk(" a", token_ids=2))
    assert counter.count(Chunk(" b")) == 1
    assert counter.fallback_chunks == 1 and counter.needs_reconciling()


def test_held_back_tokens_count_with_the_next_content_chunk_or_the_last_one() -> None:
    counter = TokenCounter()
    assert counter.count(Chunk(" a", token_ids=1)) == 1
    counter.hold(Chunk("", token_ids=1))  # an incomplete UTF-8 sequence: id sent, text held back
    counter.hold(Chunk("", token_ids=1))
    assert counter.count(Chunk("\u20ac", token_ids=1)) == 3  # the text shows with the third byte
    assert counter.held_at_end(4) == 0
    counter.hold(Chunk("", token_ids=1, finish_reason="length"))  # stopped mid-character
    assert counter.held_at_end(5) == 1
    before_any = TokenCounter()
    before_any.hold(Chunk("", token_ids=2))  # held before the first content chunk chose the source
    assert before_any.count(Chunk(" b", token_ids=1)) == 3


def test_held_back_tokens_with_continuous_usage_come_from_the_usage() -> None:
    counter = TokenCounter()
    assert counter.count(Chunk(" a", completion_tokens=1)) == 1
    counter.hold(Chunk("", completion_tokens=2))  # no ids: nothing to hold, the usage says it
    assert counter.count(Chunk(" b", completion_tokens=3)) == 2
    assert counter.held_at_end(4) == 1 and counter.held_at_end(None) == 0
    with_fallback = TokenCounter()
    with_fallback.count(Chunk(" a", completion_tokens=1))
    with_fallback.count(Chunk(" b"))  # no usage on this chunk: a fallback, so the usage reconciles
    assert with_fallback.needs_reconciling() and with_fallback.held_at_end(5) == 0  # not counted twice
    by_chunks = TokenCounter()
    by_chunks.count(Chunk(" a"))
    by_chunks.hold(Chunk("", token_ids=1))  # ids appear too late to be the source: reconciliation's job
    assert by_chunks.held_at_end(3) == 0


def test_tokenizer_file_needs_the_extra_or_names_the_file(tmp_path: object) -> None:
    try:
        import tokenizers  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match=r"tokenizer_file /nonexistent.json: .*pip install"):
            load_tokenizer("/nonexistent.json")
    else:
        with pytest.raises(ValueError, match=r"tokenizer_file /nonexistent\.json: cannot load it"):
            load_tokenizer("/nonexistent.json")
