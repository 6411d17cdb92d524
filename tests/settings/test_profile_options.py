"""The profile command's options: lengths from the flags, each bad flag named, all of them at once."""

from __future__ import annotations

import argparse

import pytest

from exporter.cli.flags import merged_options
from exporter.cli.profile import add_arguments
from exporter.settings.problems import SettingsError
from exporter.settings.profile_options import ProfileOptions, read_lengths, read_profile_options


def profile_options(*flags: str) -> ProfileOptions:
    """``profile``'s options as its command line gives them."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return read_profile_options(merged_options(parser.parse_args(list(flags))))


@pytest.mark.parametrize(
    ("lengths", "max_length", "message"),
    [
        ("128,big", None, '--lengths "128,big": expected integers'),
        ("0,128", None, "--lengths: every length must be >= 1 token"),
        # Each once taken without a word: the ladder's top ignored, a length profiled twice.
        ("128,256", 64, "give either --lengths or --max-length (the top of the default ladder), not both"),
        ("512,128,128,512,64", None, "--lengths: 128, 512 given more than once; list each length once"),
        # Once read as "not given": the whole default ladder ran.
        (None, 0, "--max-length: a prompt-length ladder needs 1 <= low <= high"),
    ],
)
def test_bad_lengths_name_the_flag(lengths: str | None, max_length: int | None, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        read_lengths(lengths, max_length)
    assert message in str(raised.value)


def test_explicit_lengths_are_kept_in_order() -> None:
    assert read_lengths("512,128", None) == (512, 128)
    assert profile_options("--lengths", "512,128").lengths == (512, 128)


def test_every_bad_flag_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as raised:
        profile_options("--repeats", "0", "--lengths", "0", "--url", "ftp://h")
    assert str(raised.value) == (
        "--repeats must be >= 1; --lengths: every length must be >= 1 token; "
        '--url: must be an http(s) URL like http://host:8000, got "ftp://h"'
    )


def test_no_flags_give_the_defaults() -> None:
    options = profile_options()
    assert (options.target.url, options.repeats, options.workers, options.output) == (
        None,
        3,
        1,
        "prefill-model.json",
    )
    assert options.lengths[0] == 128 and options.lengths[-1] == 16384
