"""From a ``*.dashboard.py`` source to the JSON committed beside it, and the check that they agree.

``render`` is grafanalib's JSON with what Grafana 10 no longer reads taken out: the dashboard's
pre-Grafana-5 ``rows``, ``style`` and crosshair flags, and each panel's null and legacy keys (so the
committed files stay short and their diffs readable). Rows keep only the keys Grafana saves for a row.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from grafanalib import core
from grafanalib._gen import DashboardEncoder

HERE = Path(__file__).resolve().parent
SUFFIX = ".dashboard.py"
_DROPPED = ("rows", "style", "hideControls", "sharedCrosshair", "gnetId")
_LEGACY_PANEL_KEYS = (
    "error",
    "span",
    "minSpan",
    "height",
    "columns",
    "fontSize",
    "styles",
    "mappings",
    "color",
)
_ROW_KEYS = ("collapsed", "gridPos", "id", "panels", "title", "type")


def sources(folder: Path = HERE) -> list[Path]:
    """Every dashboard source in ``folder``, sorted."""
    return sorted(folder.glob(f"*{SUFFIX}"))


def json_path(source: Path) -> Path:
    """Where the JSON of ``source`` is committed: ``overview.dashboard.py`` -> ``overview.json``."""
    return source.with_name(source.name.removesuffix(SUFFIX) + ".json")


def load(source: Path) -> core.Dashboard:
    """The ``dashboard`` a source defines (grafanalib's convention for ``*.dashboard.py`` files)."""
    spec = importlib.util.spec_from_file_location(source.name.removesuffix(".py").replace(".", "_"), source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dashboard = getattr(module, "dashboard", None)
    if not isinstance(dashboard, core.Dashboard):
        raise TypeError(f"{source} defines no grafanalib Dashboard named 'dashboard'")
    return dashboard


def render(dashboard: core.Dashboard) -> dict[str, Any]:
    """The dashboard as the JSON document Grafana imports."""
    data: dict[str, Any] = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    for key in _DROPPED:
        data.pop(key, None)
    data["panels"] = [_panel(panel) for panel in data["panels"]]
    return data


def _panel(panel: dict[str, Any]) -> dict[str, Any]:
    if panel["type"] == "row":
        return {key: panel[key] for key in _ROW_KEYS}
    kept = {k: v for k, v in panel.items() if v is not None and k not in _LEGACY_PANEL_KEYS}
    if "repeat" not in kept:
        kept.pop("repeatDirection", None)
    return kept


def text(source: Path) -> str:
    """The JSON text of ``source`` exactly as committed: sorted keys, two-space indents, final newline."""
    return json.dumps(render(load(source)), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def stale(folder: Path = HERE) -> list[Path]:
    """The JSON files that are missing or differ from what their sources generate."""
    out = []
    for source in sources(folder):
        target = json_path(source)
        if not target.exists() or target.read_text(encoding="utf-8") != text(source):
            out.append(target)
    return out


def write(folder: Path = HERE) -> list[Path]:
    """Regenerate every JSON file of ``folder``; returns the ones that changed."""
    changed = stale(folder)
    for target in changed:
        target.write_text(
            text(target.with_name(target.name.removesuffix(".json") + SUFFIX)), encoding="utf-8"
        )
    return changed
