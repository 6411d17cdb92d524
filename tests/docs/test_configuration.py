"""docs/configuration.md's key tables list exactly the keys the config parser accepts."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.docs import config_keys

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")


def documented() -> set[str]:
    """The first cell of every table row under "Every key"."""
    every = PAGE.split("## Every key", 1)[1]
    return set(re.findall(r"^\| `([^`]+)` \|", every, re.MULTILINE))


def test_every_key_the_parser_knows_is_documented() -> None:
    assert config_keys() - documented() == set(), "add a row to docs/configuration.md"


def test_every_documented_key_exists() -> None:
    assert documented() - config_keys() == set(), "docs/configuration.md names keys the parser refuses"


def test_the_parser_sees_every_section() -> None:
    """The recording opens the sections example.yaml leaves commented out, too."""
    keys = config_keys()
    assert {"traffic.ext_proc_address", "jobs.shards.count", "targets[].gateway_metrics.url"} <= keys
