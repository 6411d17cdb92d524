"""README.md is the front door: under 300 lines, the two set-up commands first (``.ci/run`` runs the
second), and what a newcomer asks first is answered there or one link away."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
RUN = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && fluidity-exporter run"
TEST = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest"


def test_under_300_lines() -> None:
    assert len(README.splitlines()) < 300


def test_the_two_commands_come_first() -> None:
    """The first code block holds the run command, then the test command, and no other command."""
    block = re.search(r"^```bash\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert block is not None
    commands = [line for line in block[1].splitlines() if line and not line.startswith("#")]
    assert commands == [RUN, TEST]
    assert README.index(block[0]) < README.index("\n## ")


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet -e '.[test]'" in ci
    assert ci.rstrip().splitlines()[-1] == "pytest"


def test_tour_names_every_command() -> None:
    from scripts.docs import command_parsers

    missing = [name for name in command_parsers() if f"fluidity-exporter {name}" not in README]
    assert not missing, f"README's tour lacks {missing}"


def test_a_newcomer_finds_the_three_answers() -> None:
    """What "NOT reliable" means, how long ``capacity`` takes and what Ctrl-C keeps."""
    assert "NOT reliable" in README and "docs/bench.md#one-rule-for-reliable" in README
    how_long = paragraph("**How long `capacity` takes.**")
    assert "minutes" in how_long and "--time-budget" in how_long
    ctrl_c = paragraph("**What Ctrl-C keeps.**")
    assert "capacity.json" in ctrl_c and "interrupted.json" in ctrl_c and "bench" in ctrl_c


def paragraph(start: str) -> str:
    """The paragraph of README that begins with ``start``."""
    assert start in README, f"README has no paragraph {start!r}"
    return README[README.index(start) :].split("\n\n", 1)[0]
