"""Every ``fluidity_*`` name that README.md or a docs/ page mentions is one the exporter serves (a family
of ``exporter.exposition.names``, or one of a histogram's series), a recording rule's part in deploy/, or
a function of ``exporter.stats``: a renamed family cannot leave a page naming the old one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.exposition import names

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_NAME = re.compile(r"\bfluidity_[a-z0-9_]*[a-z0-9]\b(?!\*)")  # "fluidity_engine_*" is a family of names


def served() -> set[str]:
    series = set()
    for spec in names.ALL:
        series |= {spec.name, spec.name.removesuffix("_total")}
        if spec.type == "histogram":
            series |= {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
    return series


def elsewhere() -> str:
    """The rules and manifests in deploy/ and the metric code's own Python names."""
    files = [*(REPO / "deploy").rglob("*.y*ml"), *(REPO / "exporter" / "stats").glob("*.py")]
    return "\n".join(path.read_text(encoding="utf-8") for path in files)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_metric_name_on_the_page_exists(page: Path) -> None:
    known, other = served(), elsewhere()
    unknown = sorted(
        name
        for name in set(_NAME.findall(page.read_text(encoding="utf-8")))
        if name not in known and not re.search(rf"\b{name}\b", other)
    )
    assert not unknown, f"{page.name} names what nothing serves: {unknown}"
