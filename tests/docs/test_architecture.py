"""docs/architecture.md names only packages and modules that exist, and describes every layer of the
import contract in pyproject.toml (its layer list is generated from it: test_generated.py)."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.docs import layers

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_named_path_exists() -> None:
    named = set(re.findall(r"`((?:exporter|tests|bench|scripts|deploy|dashboards|docs)/[\w./-]*)`", PAGE))
    missing = sorted(path for path in named if not (REPO / path.rstrip("/")).exists())
    assert not missing, f"docs/architecture.md names what is not there: {missing}"


def test_every_layer_is_described() -> None:
    """Each module of the contract has a row of the table (its package cell names it)."""
    modules = {name.strip() for row in layers() for name in re.split(r"[|:]", row)}
    cells = re.findall(r"^\| [^|]+ \| ([^|]+) \|", PAGE, re.MULTILINE)
    described = {name for cell in cells for name in re.findall(r"`exporter/(\w+)", cell)}
    assert modules - described - {"__main__"} == set(), (
        "describe each layer's modules in docs/architecture.md"
    )


def test_every_module_a_layer_row_names_exists() -> None:
    """A row's bare module names (``plan.py``, ``shards/pool.py``) are in one of the row's packages,
    or under ``exporter/`` when the row points into another layer (``load/config_workloads.py``)."""
    missing = []
    for packages, description in re.findall(r"^\| [^|]+ \| ([^|]+) \| (.+) \|$", PAGE, re.MULTILINE):
        roots = [REPO / root for root in re.findall(r"`(exporter/\w+)`", packages)] + [
            REPO / "exporter",
            REPO,
        ]
        for name in re.findall(r"`([\w/]+\.py)`", description):
            if not any((root / name).exists() for root in roots):
                missing.append(name)
    assert not missing, f"docs/architecture.md's layer table names modules that are not there: {missing}"
