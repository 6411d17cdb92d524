"""Every query of every committed dashboard, run by a real Prometheus against real data.

One stack for the module (``tests.support.prometheus``): the daemon probes the simulator every
second with engine scraping, Prometheus scrapes it every second; a quick rate search, a quick
concurrency search and a prefill profile run through the jobs API first, so the capacity view has data.
Each query then gets Grafana's variables substituted as Grafana would (multi-value variables as a
regex group) and must parse and return at least one series with a finite value.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator

import pytest

from exporter.exposition import names
from tests.dashboards.panels import PanelQuery, queries, traffic_only
from tests.deploy import files
from tests.support.prometheus import MODULES, TARGET, Series, Stack, requires_prometheus, running_stack

pytestmark = [requires_prometheus, pytest.mark.slow]

RATE_INTERVAL_S = 10  # Grafana's $__rate_interval is at least 4 scrape intervals (1 s here): 10 s is safe
VARIABLES = {
    "datasource": "prometheus",
    "target": f"({TARGET})",  # a multi-value variable, as Grafana writes it into a regex matcher
    "module": f"({'|'.join(MODULES)})",
    "window": "1m",
    "tier": "medium",
    "__rate_interval": f"{RATE_INTERVAL_S}s",
    "__interval": "1s",
    "__range": "1m",
}
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
METRIC = re.compile(r"\bfluidity_[a-z0-9_]+")
# Queries retry until this long after the stack is ready: rates need samples on both sides of a change.
SETTLE_S = 20.0


def substitute(expr: str) -> str:
    """``expr`` with Grafana's variables replaced; an unknown variable fails the test."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in VARIABLES, f"unknown variable ${name} in {expr}"
        return VARIABLES[name]

    return VARIABLE.sub(value, expr)


def has_data(result: list[Series]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, float]]:
    # With the rule files: the SLO row reads the recording rules and the alerts' ALERTS series.
    with running_stack(tmp_path_factory.mktemp("dashboards"), rule_files=files.RULE_FILES) as stack:
        quick = {"target": TARGET, "max_trials": 2, "requests_per_trial": 20, "warmup_requests": 0}
        stack.run_job("capacity", {**quick, "module": "chat", "start": 50})
        stack.run_job("capacity", {**quick, "module": "burst", "load": "concurrency", "start": 4})
        stack.run_job("prefill-profile", {"target": TARGET, "lengths": [128, 256, 512], "repeats": 1})
        # Probes pause while a job runs: wait until every module is probed again within a rate interval.
        stack.wait_for(
            f'rate(fluidity_probe_requests_total{{outcome="ok"}}[{RATE_INTERVAL_S}s]) > 0',
            accept=lambda result: {s["metric"]["module"] for s in result} == set(MODULES),
        )
        yield stack, time.monotonic() + SETTLE_S


# Series of a measured capacity (state found), which the fixture's quick searches cannot give: the
# tiny simulator still passes at the job limits (a lower bound). They parse (checked below); their
# values are covered by tests/exposition/test_jobs.py and promtool's tests of the capacity rules.
NEEDS_A_FOUND_CAPACITY = {
    "capacity/Capacity (rate searches)/A",
    "capacity/Capacity (concurrency searches)/A",
    "capacity/Capacity over time/A",
    "capacity/Capacity over time/B",
    "capacity/Capacity bracket/B",  # the lowest failing load: none failed
}
# Burn rates of windows recorded once a series has that much history, which the stack never has
# (fluidity-rules.yml), and the table of firing and pending alerts, empty while the simulator is healthy.
EMPTY_ON_A_YOUNG_HEALTHY_STACK = {
    "overview/Error-budget burn rate per window/E",  # 6h
    "overview/Error-budget burn rate per window/F",  # 1d
    "overview/Error-budget burn rate per window/G",  # 3d
    "overview/Fluidity alerts, firing and pending/A",
}

# Prompt calibration's counters exist only for targets the exporter calibrates, and it calibrates no
# simulated one. They parse (checked below); tests/daemon/test_served_context.py counts them.
NEEDS_A_CALIBRATING_TARGET = {
    "overview/Prompt-calibration requests over the time range/A",
    "overview/Prompt-calibration time over the time range/A",
}

# Real traffic observed through Envoy (``traffic_only``): the stack's daemon has no traffic: section and
# no Envoy, so these parse (checked below) and return nothing here; tests/traffic/test_traffic_live.py
# runs them on a stack whose daemon observes user streams through a real Envoy.


# A window percentile of the engine or the gateway is exported either measured or, where it lies in the
# first or +Inf bucket, as a bound in its ``..._bound_seconds`` twin, never both: the simulator's queue
# time, for one, always lies in the first bucket. A query of either family needs data from one of them.
BOUNDS = [spec.name for spec in names.COLLECTED if spec.name.endswith("_bound_seconds")]
TWINS = {
    **{bound: bound.replace("_bound_seconds", "_seconds") for bound in BOUNDS},
    **{bound.replace("_bound_seconds", "_seconds"): bound for bound in BOUNDS},
}


def twin_expr(expr: str) -> str | None:
    """``expr`` with a window percentile family swapped for its bound twin (or back); None if none."""
    swapped = METRIC.sub(lambda match: TWINS.get(match.group(0), match.group(0)), expr)
    return swapped if swapped != expr else None


@pytest.mark.parametrize("query", queries(), ids=lambda query: query.id)
def test_the_query_parses_and_returns_data(query: PanelQuery, stack: tuple[Stack, float]) -> None:
    prometheus, settle_by = stack
    expr = substitute(query.target["expr"])
    twin = twin_expr(expr)
    while True:
        result = prometheus.query(expr)  # raises with Prometheus' message when it does not parse
        if (
            query.id in NEEDS_A_FOUND_CAPACITY | EMPTY_ON_A_YOUNG_HEALTHY_STACK | NEEDS_A_CALIBRATING_TARGET
            or traffic_only(query)
        ):
            return
        if not has_data(result) and twin is not None:
            result = prometheus.query(twin)
        if has_data(result) or time.monotonic() > settle_by:
            break
        time.sleep(0.5)
    assert has_data(result), f"{query.id}: no series with a finite value for\n{expr}\n-> {result}"
