"""docs/cli.md against the parser, both ways: every flag a command's ``--help`` shows is documented in
that command's section, and every flag the section names exists (the parser is built in-process)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.docs import command_parsers, documented_flags

CLI = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
PARSERS = command_parsers()


def section(command: str) -> str:
    """The text under ``### `command``` up to the next heading of that level or higher."""
    match = re.search(rf"^### `{re.escape(command)}`\n(.*?)(?=^##? |^### |\Z)", CLI, re.MULTILINE | re.DOTALL)
    assert match, f"docs/cli.md has no section for {command}"
    return match[1]


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_flags_match_help_both_ways(command: str) -> None:
    parser = PARSERS[command]
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9.-]*[a-z0-9])", section(command)))
    known = {flag for action in parser._actions for flag in action.option_strings}
    assert documented_flags(parser) - named == set(), "flags in --help, not in docs/cli.md"
    assert named - known - {"--help"} == set(), "flags in docs/cli.md that the command does not have"


def test_every_section_is_a_command() -> None:
    assert set(re.findall(r"^### `([a-z-]+)`$", CLI, re.MULTILINE)) == set(PARSERS)


# Pages about our commands, and the flags of other tools they name (mypy's, the generators').
PROSE = ("README.md", "bench.md", "capacity.md", "daemon.md", "configuration.md", "traffic.md", "sim.md")
OTHER_TOOLS = {"--strict", "--check"}


@pytest.mark.parametrize("page", PROSE)
def test_every_flag_the_prose_names_exists(page: str) -> None:
    """A flag renamed in the code must not live on in the pages that explain the commands."""
    repo = Path(__file__).resolve().parents[2]
    text = (repo / page if page == "README.md" else repo / "docs" / page).read_text(encoding="utf-8")
    known = {
        flag for parser in PARSERS.values() for action in parser._actions for flag in action.option_strings
    }
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9.-]*[a-z0-9])", text))
    assert named - known - OTHER_TOOLS == set()
