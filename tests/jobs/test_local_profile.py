"""The profile command's ladder: lengths from the options, fitted to the target's context."""

from __future__ import annotations

import pytest

from exporter.jobs.local_profile import lengths
from exporter.jobs.prefill_profile import fit_ladder
from exporter.settings.problems import SettingsError


def test_the_ladder_keeps_what_fits_and_ends_at_the_longest_prompt_that_does() -> None:
    ladder = (128, 1024, 8192, 16384)
    assert fit_ladder(ladder, None, exact=True) == (ladder, [])
    assert fit_ladder(ladder, 8192, exact=True) == ((128, 1024, 8191), [8192, 16384])
    kept, left_out = fit_ladder(ladder, 8192, exact=False)  # a 3% margin
    assert kept == (128, 1024, 7945) and left_out == [8192, 16384]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lengths": "128,big", "max_length": None}, '--lengths "128,big": expected integers'),
        ({"lengths": "0,128", "max_length": None}, "--lengths: every length must be >= 1 token"),
        # Each once taken without a word: the ladder's top ignored, a length profiled twice.
        (
            {"lengths": "128,256", "max_length": 64},
            "give either --lengths or --max-length (the top of the default ladder), not both",
        ),
        (
            {"lengths": "512,128,128,512,64", "max_length": None},
            "--lengths: 128, 512 given more than once; list each length once",
        ),
        # Once read as "not given": the whole default ladder ran.
        ({"lengths": None, "max_length": 0}, "--max-length: a prompt-length ladder needs 1 <= low <= high"),
    ],
)
def test_bad_lengths_name_the_flag(options: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        lengths(options)
    assert message in str(raised.value)


def test_explicit_lengths_are_kept_in_order() -> None:
    assert lengths({"lengths": "512,128", "max_length": None}) == (512, 128)
