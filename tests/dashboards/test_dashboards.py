"""The committed dashboards: generated from their sources, importable into Grafana 10+, every panel with
a unit, a description and the datasource variable, every metric one the exporter exposes; and the
Grafana provisioning files beside them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import build
from dashboards.__main__ import main
from dashboards.common import BURN_THRESHOLDS, BURN_WINDOWS, IDENTITY
from exporter.exposition import names
from tests.dashboards.panels import committed, panels, queries
from tests.deploy import files

REPO = Path(__file__).resolve().parents[2]
PROVISIONING = REPO / "deploy" / "grafana" / "provisioning"
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
# Panel types of current Grafana (React panels); the Angular ones (graph, singlestat, table-old...)
# are gone from Grafana 11 and deprecated in 10.
CURRENT_TYPES = {"timeseries", "stat", "heatmap", "table", "bargauge", "state-timeline", "barchart", "gauge"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
# A metric name of ours, not glued to a recorded name's colons (target_module_tier:fluidity_...:ratio).
METRIC = re.compile(r"(?<![\w:])(fluidity_[a-z0-9_]+)(?![\w:])")
RECORDED = re.compile(r"(?<![\w:])([a-z_]+:[a-z0-9_]+:[a-z0-9_]+)(?![\w:])")
EXPOSED = {spec.name for spec in names.ALL}

DASHBOARDS = committed()
PANELS = [(name, panel) for name, dashboard in DASHBOARDS.items() for panel in panels(dashboard)]


def panel_id(item: tuple[str, dict[str, Any]]) -> str:
    return f"{item[0]}/{item[1]['title']}"


def test_the_committed_json_is_what_the_sources_generate() -> None:
    assert [p.name for p in build.sources()] == [
        "capacity.dashboard.py",
        "engine.dashboard.py",
        "overview.dashboard.py",
        "traffic.dashboard.py",
    ]
    stale = build.stale()
    assert not stale, f"stale dashboard JSON {[str(p) for p in stale]}: regenerate with python -m dashboards"


def test_check_mode_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0
    for source in build.sources():
        (tmp_path / source.name).write_text(source.read_text())
    assert [p.name for p in build.stale(tmp_path)] == [
        "capacity.json",
        "engine.json",
        "overview.json",
        "traffic.json",
    ]
    assert [p.name for p in build.write(tmp_path)] == [
        "capacity.json",
        "engine.json",
        "overview.json",
        "traffic.json",
    ]
    assert build.stale(tmp_path) == []
    (tmp_path / "engine.json").write_text("{}\n")
    assert build.stale(tmp_path) == [tmp_path / "engine.json"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_settings_fit_grafana_10(name: str) -> None:
    dashboard = DASHBOARDS[name]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] == f"fluidity-{name}" and dashboard["title"].startswith("Fluidity / ")
    assert dashboard["id"] is None  # an id would clash with an existing dashboard on import
    assert "fluidity" in dashboard["tags"] and dashboard["description"]
    assert dashboard["graphTooltip"] == 1  # shared crosshair: panels correlate on one time axis
    assert "rows" not in dashboard  # pre-Grafana-5 layout
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_template_variables(name: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    assert {"datasource", "target", "module"} <= set(variables)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE_REF
            assert variable["query"].startswith("label_values(")
            assert METRIC.search(variable["query"]).group(1) in EXPOSED  # type: ignore[union-attr]
    for multi in ("target", "module"):
        assert variables[multi]["multi"] and variables[multi]["includeAll"]


@pytest.mark.parametrize("item", PANELS, ids=panel_id)
def test_every_panel_has_a_current_type_unit_description_and_the_datasource_variable(
    item: tuple[str, dict[str, Any]],
) -> None:
    _, panel = item
    assert panel["type"] in CURRENT_TYPES
    assert panel["fieldConfig"]["defaults"].get("unit"), "no unit"
    assert len(panel.get("description", "")) >= 60, "no description worth the name"
    assert "Good" in panel["description"], "the description should say what good looks like"
    assert panel["datasource"] == DATASOURCE_REF
    assert panel["targets"]
    refs = [target["refId"] for target in panel["targets"]]
    assert len(refs) == len(set(refs))
    for target in panel["targets"]:
        assert target["datasource"] == DATASOURCE_REF
        assert target["expr"].strip()
        assert target["range"] != target["instant"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_fit_the_grid_without_overlapping(name: str) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in DASHBOARDS[name]["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & taken, panel["title"]
        taken |= cells


def test_every_sum_by_target_keeps_the_identity_labels_of_the_rules() -> None:
    # Two deployments of one base (two namespaces, same target and module) stay two series, as in the
    # Prometheus rules, whose labels the same constant names.
    assert files.IDENTITY_LABELS == IDENTITY
    kept = ", ".join(IDENTITY) + ", "
    groupings = [
        (query.id, labels)
        for query in queries()
        for labels in re.findall(r"\bby \(([^)]*)\)", query.target["expr"])
        if "target" in labels and "module" in labels
    ]
    assert len(groupings) > 20
    assert [
        (where, labels) for where, labels in groupings if not labels.replace("le, ", "").startswith(kept)
    ] == []


def test_every_recorded_series_a_query_names_is_one_the_rules_record() -> None:
    used = {name for query in queries() for name in RECORDED.findall(query.target["expr"])}
    assert "target_module_tier:fluidity_slo_burn_rate:ratio_rate1h" in used
    assert used <= files.recorded_names()


def test_the_burn_rate_panel_shows_the_windows_and_thresholds_of_the_alerts() -> None:
    pairs = {
        (alert["labels"]["long_window"], alert["labels"]["short_window"], float(threshold))
        for alert in files.alerts()
        if "long_window" in alert["labels"]
        for threshold in set(re.findall(r"> ([\d.]+)", alert["expr"]))
    }
    assert set(BURN_THRESHOLDS) == pairs
    assert set(BURN_WINDOWS) == {w for long, short, _ in pairs for w in (long, short)}
    (panel,) = [p for _, p in PANELS if p["title"] == "Error-budget burn rate per window"]
    steps = {step["value"] for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]}
    assert steps - {None} == {threshold for _, _, threshold in pairs}


def test_every_metric_a_query_names_is_one_the_exporter_exposes() -> None:
    used = set()
    for query in queries():
        for metric in METRIC.findall(query.target["expr"]):
            base = next((metric.removesuffix(s) for s in HISTOGRAM_SUFFIXES if metric.endswith(s)), metric)
            assert base in EXPOSED, f"{query.id}: {metric} is not in exporter.exposition.names"
            used.add(base)
    # The dashboards show every family a user looks at; only /probe's own families and a few self-metrics are left.
    left = EXPOSED - used
    assert left <= {
        names.PROBE_SUCCESS.name,
        names.PROBE_DURATION.name,
        names.PROBE_FAILURE.name,  # /probe only, like its two siblings
        names.PROBE_OUTPUT_TOKENS.name,
        names.WINDOW_REQUESTS.name,  # the window and module variables list its labels
        names.BUILD_INFO.name,
        names.JOB_RUNS.name,
        names.ENGINE_SCRAPES.name,
        names.CONFIG_RELOAD_SUCCESSFUL.name,
        names.CONFIG_RELOAD_TIMESTAMP.name,
        names.STATE_UNWRITTEN.name,  # a self-metric read like the reload gauge: 1 says the disk failed
        names.PROBE_DEADLINES.name,
        names.PROBE_LAST_RUN_OK.name,  # FluidityTargetDown's input; the panels show requests by outcome
        names.PROBE_OVER_CONTEXT.name,  # FluidityProbeOverContext's input: a module with no data to show
        names.CAPACITY_FOUND.name,  # the capacity view's module variable lists its labels; _state says more
    }, sorted(left)


def test_provisioning_points_grafana_at_prometheus_and_the_dashboards() -> None:
    sources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    assert sources["apiVersion"] == 1
    [datasource] = sources["datasources"]
    assert datasource["type"] == "prometheus" and datasource["access"] == "proxy"
    assert datasource["url"] == "${PROMETHEUS_URL}"  # Grafana expands it from its environment
    assert datasource["isDefault"] is True
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "fluidity.yaml").read_text())
    assert providers["apiVersion"] == 1
    [provider] = providers["providers"]
    assert provider["type"] == "file" and provider["folder"]
    assert provider["options"]["path"].startswith("/")


def test_the_trials_table_says_its_pass_column_is_the_point_verdict() -> None:
    [panel] = [p for name, p in PANELS if name == "capacity" and p["title"] == "Trials of the latest search"]
    [organize] = [t for t in panel["transformations"] if t["id"] == "organize"]
    assert organize["options"]["renameByName"]["Value #B"] == "point verdict"
    assert "inconclusive" in panel["description"] and "interval verdict" in panel["description"]


def _legend(target: dict[str, Any]) -> str:
    """A legend as Grafana shows it for one series (labels filled in, a bound series an upper one)."""
    values = {"target": "llm", "percentile": "50", "bound": "upper"}
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], target["legendFormat"])


def _dashed(panel: dict[str, Any], legend: str) -> bool:
    overrides = panel["fieldConfig"]["overrides"]
    return any(
        o["matcher"]["id"] == "byRegexp"
        and re.fullmatch(o["matcher"]["options"], legend)
        and any(p["id"] == "custom.lineStyle" for p in o["properties"])
        for o in overrides
    )


def test_a_panel_of_a_window_percentile_draws_its_bound_dashed_beside_it() -> None:
    # A percentile in a bucket starting at 0 or in +Inf is exported only as ..._bound_seconds: a panel
    # with the percentile alone goes blank exactly then, and a bound drawn like a measurement is read as
    # one.
    bounds = {spec.name for spec in names.COLLECTED if spec.name.endswith("_bound_seconds")}
    for dashboard_name, panel in PANELS:
        where = f"{dashboard_name}/{panel['title']}"
        by_metric = {m: t for t in panel.get("targets", []) for m in METRIC.findall(t["expr"])}
        for bound in bounds:
            value = bound.replace("_bound_seconds", "_seconds")
            if value not in by_metric:
                continue
            assert bound in by_metric, f"{where} shows {value} without its bound"
            assert _dashed(panel, _legend(by_metric[bound])), f"{where} draws {bound} like a measurement"
            assert not _dashed(panel, _legend(by_metric[value])), f"{where} draws {value} dashed"
