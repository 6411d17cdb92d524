"""Hypothesis strategies shared by the stats tests: request traces whose tokens land on their
deadlines exactly as often as a float rounding would flip them."""

from __future__ import annotations

from hypothesis import strategies as st

DECODE_DEADLINES = [0.025, 0.05, 0.1, 0.03, 0.07]


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[list[float]], float, float]:
    """Up to 8 requests' inter-token gaps, a prefill deadline and a decode deadline."""
    dd = draw(st.sampled_from(DECODE_DEADLINES) | st.floats(0.001, 0.5))
    dp = draw(st.sampled_from([0.0, 0.1, 0.5, 3 * dd]) | st.floats(0.0, 2.0))
    # Exact multiples of Dd and sums of them put tokens right on their deadlines, where a float
    # rounding difference would flip on-time into late.
    gap = st.one_of(
        st.integers(0, 6).map(lambda k: k * dd),
        st.sampled_from([0.0, dd, dd + dd + dd, 0.1 + 0.2, dd / 3]),
        st.floats(0.0, 1.0),
        st.floats(0.0, 0.2),
    )
    requests = draw(st.lists(st.lists(gap, max_size=40), min_size=1, max_size=8))
    return requests, dp, dd
