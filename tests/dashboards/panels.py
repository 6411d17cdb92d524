"""The committed dashboards as the tests read them: every panel, and every query with its panel."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dashboards import build


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: dict[str, Any]
    target: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.dashboard}/{self.panel['title']}/{self.target['refId']}"


def committed() -> dict[str, dict[str, Any]]:
    """Every committed dashboard JSON by file stem (overview, engine, capacity)."""
    return {
        build.json_path(source).stem: json.loads(build.json_path(source).read_text())
        for source in build.sources()
    }


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but the row headers, collapsed rows' panels included."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries() -> list[PanelQuery]:
    return [
        PanelQuery(name, panel, target)
        for name, dashboard in committed().items()
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]


FAMILY = re.compile(r"\bfluidity_[a-z0-9_]+")


def traffic_only(query: PanelQuery) -> bool:
    """A query of real traffic alone: it reads a traffic recording rule, or traffic families only."""
    expr = query.target["expr"]
    if ":fluidity_traffic_" in expr:
        return True
    families = set(FAMILY.findall(expr))
    return bool(families) and all(family.startswith("fluidity_traffic_") for family in families)
