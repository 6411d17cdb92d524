"""grafanalib is needed only to generate the dashboards: an extra (``dashboards``, and the test extra that
``.ci/run`` installs), never a runtime dependency, and nothing the exporter runs imports it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_grafanalib_is_an_extra_not_a_runtime_dependency() -> None:
    extras = PROJECT["optional-dependencies"]
    assert "grafanalib" not in names(PROJECT["dependencies"])
    assert "grafanalib" in names(extras["dashboards"]) and "grafanalib" in names(extras["test"])
    pinned = {r for r in [*extras["dashboards"], *extras["test"]] if r.startswith("grafanalib")}
    assert pinned == {"grafanalib==0.7.1"}, "one pin: the committed JSON is compared byte for byte"


def test_nothing_under_exporter_imports_grafanalib() -> None:
    importers = [
        str(path.relative_to(REPO))
        for path in (REPO / "exporter").rglob("*.py")
        if re.search(r"^\s*(import|from) grafanalib", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert importers == []
