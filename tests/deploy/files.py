"""The deploy artefacts the tests read: Prometheus rule files and their unit tests, the PrometheusRule,
the Grafana alerting files and the runbook, loaded as plain data."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RECORDING_RULES = PROMETHEUS / "rules" / "fluidity-rules.yml"
ALERTING_RULES = PROMETHEUS / "rules" / "fluidity-alerts.yml"
RULE_FILES = (RECORDING_RULES, ALERTING_RULES)
RULE_TESTS = tuple(sorted((PROMETHEUS / "tests").glob("*.yml")))
PROMETHEUS_RULE = PROMETHEUS / "prometheus-rule.yaml"
GENERATOR = PROMETHEUS / "generate.py"
GRAFANA = ROOT / "deploy" / "grafana" / "alerting"
GRAFANA_RULES = GRAFANA / "fluidity-alert-rules.yaml"
CONTACT_POINTS = GRAFANA / "contact-points.yaml"
POLICIES = GRAFANA / "notification-policies.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"

SEVERITIES = ("page", "ticket")
# The scrape's labels every rule keeps (generate.py's default --identity-labels).
IDENTITY_LABELS = ("namespace", "cluster", "job")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """``promtool`` with ``args``: its output captured, bounded in time."""
    return subprocess.run(["promtool", *args], capture_output=True, text=True, check=False, timeout=120)


needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("CI"),
    reason="promtool comes with Debian's prometheus package (CI installs it and never skips)",
)
needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None and not os.environ.get("CI"),
    reason="Debian's prometheus package provides the server (CI installs it and never skips)",
)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def groups(path: Path) -> list[dict[str, Any]]:
    return list(load(path)["groups"])


def rules(path: Path) -> Iterator[dict[str, Any]]:
    for group in groups(path):
        yield from group["rules"]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules(ALERTING_RULES) if "alert" in rule]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules(RECORDING_RULES)}


def objective() -> tuple[float, str]:
    """The SLO objective and its tier, from the recording rules."""
    (rule,) = [r for r in rules(RECORDING_RULES) if r["record"] == "fluidity:slo_objective:ratio"]
    match = re.fullmatch(r"vector\(([\d.]+)\)", rule["expr"].strip())
    assert match is not None
    return float(match.group(1)), rule["labels"]["tier"]


def grafana_rules() -> list[dict[str, Any]]:
    return [rule for group in load(GRAFANA_RULES)["groups"] for rule in group["rules"]]


def grafana_queries() -> list[tuple[str, str]]:
    """(rule uid/refId, PromQL) of every Prometheus query of the Grafana rules."""
    return [
        (f"{rule['uid']}/{query['refId']}", query["model"]["expr"])
        for rule in grafana_rules()
        for query in rule["data"]
        if query["datasourceUid"] != "__expr__"
    ]


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the runbook's headings: lower case, punctuation gone, spaces to dashes."""
    headings = re.findall(r"^#{1,6} (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading).strip().lower().replace(" ", "-") for heading in headings}


def runbook_promql() -> list[str]:
    """Every line of the runbook's ```promql blocks that is a query (comments and blanks left out)."""
    blocks = re.findall(r"```promql\n(.*?)```", RUNBOOK.read_text(), flags=re.DOTALL)
    lines = (line.strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]
