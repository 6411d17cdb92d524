"""What the pages and the example config say calibration sends is what it sends: the count was "3" in
``--help`` and ``example.yaml`` while the code sent eight."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.load.calibration import CALIBRATION_BUDGET_S, CALIBRATION_REQUESTS

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
COUNT = re.compile(r"\b(\w+) one-token requests\b|\((\d+) requests, (\d+) s at most\)")
# docs/cli.md is --help, generated from the constants and checked by ``scripts.docs --check``.
PLACES = ("deploy/config/example.yaml", "docs/daemon.md", "docs/bench.md")


@pytest.mark.parametrize("place", PLACES)
def test_every_count_of_calibration_requests_is_the_code_s(place: str) -> None:
    text = (ROOT / place).read_text(encoding="utf-8")
    found = COUNT.findall(text)
    assert found, f"{place} no longer says how many requests calibration sends"
    for word, number, seconds in found:
        said = WORDS.get(word.lower()) if word else int(number)
        assert said == CALIBRATION_REQUESTS, f"{place}: {word or number} requests"
        if seconds:
            assert float(seconds) == CALIBRATION_BUDGET_S
