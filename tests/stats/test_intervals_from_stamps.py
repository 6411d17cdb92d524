"""``intervals_from_stamps``: each chunk's gap, then a zero gap per further token of the chunk."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.stats.batch import intervals_from_stamps


def by_definition(start: float, stamps: list[float], counts: list[int]) -> list[float]:
    out: list[float] = []
    previous = start
    for stamp, count in zip(stamps, counts, strict=True):
        out.append(max(stamp - previous, 0.0))
        out.extend([0.0] * (count - 1))
        previous = stamp
    return out


def test_a_chunk_of_several_tokens_adds_zero_gaps() -> None:
    assert intervals_from_stamps(1.0, [1.5, 1.75, 2.0], [1, 3, 1]) == [0.5, 0.25, 0.0, 0.0, 0.25]


def test_a_stamp_before_the_previous_one_gives_a_zero_gap() -> None:
    assert intervals_from_stamps(0.0, [1.0, 0.5, 2.0], [1, 1, 1]) == [1.0, 0.0, 1.5]


def test_stamps_and_counts_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 stamps for 1 token counts"):
        intervals_from_stamps(0.0, [1.0, 2.0], [1])


@given(
    st.floats(-10, 10),
    st.lists(st.tuples(st.floats(-10, 10), st.integers(0, 4)), max_size=60),
)
def test_it_is_the_definition(start: float, chunks: list[tuple[float, int]]) -> None:
    stamps, counts = [s for s, _ in chunks], [c for _, c in chunks]
    assert intervals_from_stamps(start, stamps, counts) == by_definition(start, stamps, counts)
