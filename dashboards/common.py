"""What every dashboard shares: template variables, PromQL builders, panel builders and the grid layout.

Metric names come from ``exporter.exposition.names``, so a renamed metric breaks the build (and the drift
test) instead of leaving a dashboard that silently shows nothing.

grafanalib 0.7 writes TimeSeries, Stat, Table and StateTimeline in their current shape, but its Heatmap
and BarGauge still in the Grafana 7 shape (angular heatmap options, ``options.fieldOptions``) and its
``Threshold`` with the string "null" for the base step. ``Heatmap`` and ``BarGauge`` here subclass its
``Panel`` and write what Grafana 10 saves; thresholds and value mappings are plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import attr
from grafanalib import core

from exporter.exposition import names
from exporter.exposition.names import MetricSpec

SCHEMA_VERSION: Final = 39  # what Grafana 10.3-10.4 and 11.0 save; Grafana 10.0 reads it as is
TAGS: Final = ("fluidity",)
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH: Final = 24

# The scrape's labels every aggregation keeps beside target and module, as the Prometheus rules do
# (deploy/prometheus/generate.py's IDENTITY_LABELS): two deployments of one base stay apart.
IDENTITY: Final = ("namespace", "cluster", "job")
# The windows of the burn-rate alerts' pairs, and each pair's (long, short, threshold), as
# deploy/prometheus/rules/fluidity-alerts.yml has them (tests/dashboards keeps them equal).
BURN_WINDOWS: Final = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
BURN_THRESHOLDS: Final = (("1h", "5m", 14.4), ("6h", "30m", 6.0), ("1d", "2h", 3.0), ("3d", "6h", 1.0))

# Label selectors: every query is narrowed by the dashboard's template variables.
PROBE: Final = '{target=~"$target",module=~"$module"}'
WINDOWED: Final = '{target=~"$target",module=~"$module",window="$window"}'
ENGINE: Final = '{target=~"$target"}'
ENGINE_WINDOWED: Final = '{target=~"$target",window="$window"}'
FAILED: Final = '{target=~"$target",module=~"$module",outcome!="ok"}'
TIERED: Final = '{target=~"$target",module=~"$module",tier="$tier"}'
RATE_INTERVAL: Final = "$__rate_interval"
# What a panel sums by: one series per deployment (IDENTITY), target and module, never merged.
SERIES: Final = (*IDENTITY, "target", "module")

# Grafana unit ids.
SECONDS: Final = "s"
RATIO: Final = "percentunit"
REQUESTS_PER_SECOND: Final = "reqps"
COUNT: Final = "short"
STATE: Final = "none"  # 0/1 values shown through value mappings
TOKENS_PER_SECOND: Final = "suffix: tok/s"
RUNS_PER_SECOND: Final = "suffix: runs/s"
FACTOR: Final = "suffix:x"
FROM_NOW: Final = "dateTimeFromNow"  # milliseconds since the epoch, shown as "3 hours ago"


# --- PromQL ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One Prometheus query of a panel, stored as Grafana 10's query editor saves it ("code" mode)."""

    expr: str
    legend: str = "__auto"
    instant: bool = False
    format: str = "time_series"  # or "heatmap" (buckets by le) or "table"

    def to_json(self, ref_id: str) -> dict[str, Any]:
        return {
            "datasource": dict(DATASOURCE),
            "editorMode": "code",
            "expr": self.expr,
            "format": self.format,
            "instant": self.instant,
            "legendFormat": self.legend,
            "range": not self.instant,
            "refId": ref_id,
        }


def rate(spec: MetricSpec, selector: str = PROBE, *, suffix: str = "", window: str = RATE_INTERVAL) -> str:
    """``rate(name{selector}[window])``; ``suffix`` picks ``_bucket``/``_count`` of a histogram."""
    return f"rate({spec.name}{suffix}{selector}[{window}])"


def by(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def sum_rate(
    spec: MetricSpec, labels: Sequence[str], selector: str = PROBE, *, window: str = RATE_INTERVAL
) -> str:
    return f"sum by ({by(labels)}) ({rate(spec, selector, window=window)})"


def quantile(q: float, spec: MetricSpec, labels: Sequence[str] = SERIES, selector: str = PROBE) -> str:
    """A percentile from a histogram family, summed over sidecars (``sum by (le, ...)``)."""
    buckets = rate(spec, selector, suffix="_bucket")
    return f"histogram_quantile({q:g}, sum by ({by(('le', *labels))}) ({buckets}))"


def buckets(spec: MetricSpec, selector: str = PROBE) -> str:
    """The per-bucket rate of a histogram, as a heatmap panel reads it (``format: heatmap``)."""
    return f"sum by (le) ({rate(spec, selector, suffix='_bucket')})"


def service_level(labels: Sequence[str], selector: str = PROBE, *, window: str = RATE_INTERVAL) -> str:
    """Token-weighted fluidity, ``1 - missed deadlines / deadlines``, from the two counters."""
    missed = sum_rate(names.PROBE_DEADLINES_MISSED, labels, selector, window=window)
    total = sum_rate(names.PROBE_DEADLINES, labels, selector, window=window)
    return f"1 - {missed} / {total}"


def percentile_queries(
    spec: MetricSpec, qs: Sequence[float], legend: str = "{{target}}/{{module}}"
) -> list[Query]:
    return [Query(quantile(q, spec), f"{legend} p{q * 100:g}") for q in qs]


# --- Panels ------------------------------------------------------------------------------------------


def steps(base: str, *levels: tuple[float, str]) -> list[dict[str, Any]]:
    """Threshold steps: ``base`` below the first level, then each level's colour from its value up."""
    return [{"color": base, "value": None}] + [{"color": color, "value": value} for value, color in levels]


def value_text(texts: Mapping[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """A value mapping: ``{1: ("met", "green")}`` shows 1 as a green "met"."""
    options = {
        str(value): {"text": text, "color": color, "index": index}
        for index, (value, (text, color)) in enumerate(texts.items())
    }
    return [{"type": "value", "options": options}]


def unit_override(ref_id: str, unit: str, *, right: bool = True) -> dict[str, Any]:
    """Another unit (on the right axis) for the series of one query of a time series panel."""
    properties: list[dict[str, Any]] = [{"id": "unit", "value": unit}]
    if right:
        properties.append({"id": "custom.axisPlacement", "value": "right"})
    return {"matcher": {"id": "byFrameRefID", "options": ref_id}, "properties": properties}


def _common(title: str, description: str, queries: Sequence[Query]) -> dict[str, Any]:
    targets = [query.to_json(chr(ord("A") + index)) for index, query in enumerate(queries)]
    return {
        "title": title,
        "description": description,
        "dataSource": dict(DATASOURCE),
        "targets": targets,
        "maxDataPoints": None,  # Grafana picks one point per pixel; grafanalib's default is 100
    }


def timeseries(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    low: int | None = None,
    high: int | None = None,
    stacked: bool = False,
    bars: bool = False,
    thresholds: list[dict[str, Any]] | None = None,
    overrides: Sequence[dict[str, Any]] = (),
    step: bool = False,
) -> core.TimeSeries:
    """A time series panel; ``thresholds`` are drawn as dashed lines."""
    return core.TimeSeries(
        **_common(title, description, queries),
        unit=unit,
        valueMin=low,
        valueMax=high,
        drawStyle="bars" if bars else "line",
        fillOpacity=60 if bars or stacked else 10,
        stacking={"mode": "normal", "group": "A"} if stacked else {"mode": "none"},
        lineInterpolation="stepAfter" if step else "linear",
        showPoints="never",
        spanNulls=False,
        legendDisplayMode="table",
        legendCalcs=["mean", "max", "lastNotNull"],
        tooltipMode="multi",
        tooltipSort="desc",
        thresholds=thresholds or steps("green"),
        thresholdsStyleMode="dashed" if thresholds else "off",
        overrides=list(overrides),
    )


def stat(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    thresholds: list[dict[str, Any]] | None = None,
    mappings: list[dict[str, Any]] | None = None,
    decimals: int | None = None,
    sparkline: bool = True,
) -> core.Stat:
    """A stat panel of each series' last value, coloured by ``thresholds``."""
    return core.Stat(
        **_common(title, description, queries),
        format=unit,
        decimals=decimals,
        color={"mode": "thresholds"},
        colorMode="value",
        graphMode="area" if sparkline else "none",
        reduceCalc="lastNotNull",
        textMode="value_and_name" if len(queries) > 1 or "{{" in queries[0].legend else "auto",
        mappings=mappings or [],
        noValue="no data",
        thresholds=thresholds or steps("text"),
    )


def state_timeline(
    title: str, description: str, queries: Sequence[Query], mappings: list[dict[str, Any]]
) -> core.StateTimeline:
    """A state timeline of 0/1 series shown through ``mappings``."""
    return core.StateTimeline(
        **_common(title, description, queries),
        mappings=mappings,
        colorMode="thresholds",
        showValue="never",
        extraJson={"fieldConfig": {"defaults": {"unit": STATE, "min": 0, "max": 1}}},
    )


def table(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    transformations: Sequence[dict[str, Any]] = (),
    overrides: Sequence[dict[str, Any]] = (),
    sort_by: str | None = None,
) -> core.Table:
    """A table of instant queries, usually merged into one row per label set by ``transformations``."""
    return core.Table(
        **_common(title, description, queries),
        unit=unit,
        transformations=list(transformations),
        overrides=list(overrides),
        sortBy=[core.TableSortByField(displayName=sort_by)] if sort_by else [],
        thresholds=steps("text"),
    )


@attr.s
class Heatmap(core.Panel):
    """Grafana's heatmap panel (9.1+) over pre-bucketed data: Prometheus buckets by ``le``."""

    unit: str = attr.ib(default=SECONDS)

    def to_json_data(self) -> dict[str, Any]:
        options = {
            "calculate": False,
            "cellGap": 1,
            "color": {
                "mode": "scheme",
                "scheme": "Oranges",
                "scale": "exponential",
                "exponent": 0.5,
                "steps": 64,
                "fill": "dark-orange",
                "reverse": False,
            },
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-9},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "tooltip": {"mode": "single", "show": True, "yHistogram": True},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": self.unit},
        }
        defaults = {
            "unit": self.unit,
            "custom": {"scaleDistribution": {"type": "linear"}},
            "thresholds": {"mode": "absolute", "steps": steps("green")},
        }
        field = {"defaults": defaults, "overrides": []}
        data: dict[str, Any] = self.panel_json({"fieldConfig": field, "options": options, "type": "heatmap"})
        return data


def heatmap(
    title: str, description: str, spec: MetricSpec, *, unit: str = SECONDS, selector: str = PROBE
) -> Heatmap:
    """How the observations of a histogram family spread over its buckets, per time slice."""
    query = Query(buckets(spec, selector), "{{le}}", format="heatmap")
    return Heatmap(**_common(title, description, [query]), unit=unit)


@attr.s
class BarGauge(core.Panel):
    """Grafana's bar gauge panel with the field config of Grafana 8+ (grafanalib writes Grafana 6's)."""

    unit: str = attr.ib(default=COUNT)
    low: float | None = attr.ib(default=None)
    high: float | None = attr.ib(default=None)
    steps: list[dict[str, Any]] = attr.ib(factory=list)

    def to_json_data(self) -> dict[str, Any]:
        defaults = {
            "unit": self.unit,
            "min": self.low,
            "max": self.high,
            "color": {"mode": "thresholds"},
            "thresholds": {"mode": "absolute", "steps": self.steps},
        }
        options = {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
            "valueMode": "color",
            "namePlacement": "auto",
            "sizing": "auto",
            "minVizHeight": 16,
            "minVizWidth": 8,
        }
        data: dict[str, Any] = self.panel_json(
            {"fieldConfig": {"defaults": defaults, "overrides": []}, "options": options, "type": "bargauge"}
        )
        return data


def bar_gauge(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    thresholds: list[dict[str, Any]],
    *,
    low: float | None = None,
    high: float | None = None,
) -> BarGauge:
    return BarGauge(**_common(title, description, queries), unit=unit, low=low, high=high, steps=thresholds)


# --- Template variables --------------------------------------------------------------------------------


def datasource_variable() -> core.Template:
    """The Prometheus data source every panel queries (``${datasource}``); the first one by default."""
    variable = core.Template(
        name="datasource", label="Data source", query="prometheus", type="datasource", regex=""
    )
    variable._current = {}  # Grafana selects the default Prometheus data source
    return variable


def label_variable(
    name: str, label: str, spec: MetricSpec, selector: str = "", *, multi: bool = True, default: str = ""
) -> core.Template:
    """A variable listing the values of label ``name`` on ``spec``; multi-valued ones offer "All"."""
    variable = core.Template(
        name=name,
        label=label,
        query=f"label_values({spec.name}{selector}, {name})",
        dataSource=dict(DATASOURCE),
        multi=multi,
        includeAll=multi,
        allValue=".+" if multi else None,
        refresh=core.REFRESH_ON_TIME_RANGE_CHANGE,
        regex="",
    )
    if multi:
        variable._current = {"selected": True, "text": ["All"], "value": ["$__all"]}
    elif default:
        variable._current = {"selected": True, "text": default, "value": default}
    else:
        variable._current = {}  # Grafana selects the first value
    return variable


def variables(
    *, module_source: MetricSpec = names.PROBE_REQUESTS, window: bool = False, tier: bool = False
) -> list[core.Template]:
    """datasource, target and module (from ``module_source``), and optionally window and tier."""
    out = [
        datasource_variable(),
        label_variable("target", "Target", names.PROBE_REQUESTS),
        label_variable("module", "Module", module_source, ENGINE),
    ]
    if window:
        out.append(label_variable("window", "Window", names.WINDOW_REQUESTS, ENGINE, multi=False))
    if tier:
        out.append(
            label_variable(
                "tier", "Decode tier", names.PROBE_DEADLINES, ENGINE, multi=False, default="medium"
            )
        )
    return out


# --- Layout and the dashboard ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A panel with its size in grid units (24 columns across; a height unit is 30 px)."""

    panel: core.Panel
    width: int
    height: int = 8


@dataclass(frozen=True)
class Section:
    """A titled row of cells, laid out left to right and wrapped at the grid width."""

    title: str
    cells: Sequence[Cell]


def layout(sections: Sequence[Section]) -> list[core.Panel]:
    """The panels with their grid positions, each section under a row header."""
    out: list[core.Panel] = []
    y = 0
    for section in sections:
        out.append(core.RowPanel(title=section.title, gridPos=core.GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        y += 1
        x = tallest = 0
        for cell in section.cells:
            if x + cell.width > GRID_WIDTH:
                x, y, tallest = 0, y + tallest, 0
            position = core.GridPos(h=cell.height, w=cell.width, x=x, y=y)
            out.append(attr.evolve(cell.panel, gridPos=position))
            x, tallest = x + cell.width, max(tallest, cell.height)
        y += tallest
    return out


def new_dashboard(
    title: str, uid: str, description: str, templates: list[core.Template], sections: Sequence[Section]
) -> core.Dashboard:
    """A dashboard with the shared settings: tags and links to its siblings, a shared crosshair so that
    panels correlate on one time axis, the browser's time zone, the current schema version."""
    links = [
        core.DashboardLink(
            title="Fluidity dashboards", tags=list(TAGS), asDropdown=True, includeVars=True, keepTime=True
        )
    ]
    return core.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=list(TAGS),
        links=links,
        templating=core.Templating(list=templates),
        panels=layout(sections),
        graphTooltip=core.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        schemaVersion=SCHEMA_VERSION,
        time=core.Time("now-6h", "now"),
        timezone="browser",
        refresh="1m",
    ).auto_panel_ids()
