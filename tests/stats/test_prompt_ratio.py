"""``PromptRatio``: prompt tokens per body byte, learnt from requests that reported usage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.stats.prompt_ratio import DEFAULT_TOKENS_PER_BYTE, PromptRatio


def test_before_any_report_the_default_ratio_stands_in() -> None:
    assert PromptRatio().tokens_per_byte == DEFAULT_TOKENS_PER_BYTE
    assert PromptRatio().estimate(400) == 100
    assert PromptRatio().estimate(0) == 0
    assert PromptRatio().estimate(1) == 1  # a non-empty body has a token


def test_the_ratio_follows_what_requests_reported() -> None:
    ratio = PromptRatio().learn(50, 500).learn(30, 300)
    assert ratio.tokens_per_byte == pytest.approx(0.1, rel=1e-3)
    assert ratio.estimate(2000) == 200


def test_the_past_fades() -> None:
    ratio = PromptRatio().learn(100, 1000)  # 0.1
    for _ in range(5000):
        ratio = ratio.learn(30, 100)  # a new prompt mix: 0.3
    assert ratio.tokens_per_byte == pytest.approx(0.3, rel=1e-3)


def test_an_empty_body_teaches_nothing() -> None:
    assert PromptRatio().learn(10, 0) == PromptRatio()


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 10**7)), min_size=1, max_size=50))
def test_the_ratio_lies_within_what_was_reported(reports: list[tuple[int, int]]) -> None:
    ratio = PromptRatio()
    for tokens, body in reports:
        ratio = ratio.learn(tokens, body)
    shares = [tokens / body for tokens, body in reports]
    assert min(shares) - 1e-9 <= ratio.tokens_per_byte <= max(shares) + 1e-9
