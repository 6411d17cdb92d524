"""The profile command's ladder, fitted to the target's context."""

from __future__ import annotations

from exporter.jobs.prefill_profile import fit_ladder


def test_the_ladder_keeps_what_fits_and_ends_at_the_longest_prompt_that_does() -> None:
    ladder = (128, 1024, 8192, 16384)
    assert fit_ladder(ladder, None, exact=True) == (ladder, [])
    assert fit_ladder(ladder, 8192, exact=True) == ((128, 1024, 8191), [8192, 16384])
    kept, left_out = fit_ladder(ladder, 8192, exact=False)  # a 3% margin
    assert kept == (128, 1024, 7945) and left_out == [8192, 16384]
