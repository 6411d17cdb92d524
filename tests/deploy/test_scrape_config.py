"""The exporter's scrape settings stated in several places agree: the ServiceMonitor, the plain-Prometheus
scrape config of docs/deployment.md, and Grafana's data source (whose timeInterval sets the dashboards'
$__rate_interval)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICE_MONITOR = ROOT / "deploy" / "kubernetes" / "base" / "servicemonitor.yaml"
DATASOURCE = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
DEPLOYMENT_DOC = ROOT / "docs" / "deployment.md"


def docs_scrape_config() -> dict[str, Any]:
    """The Prometheus configuration of docs/deployment.md's "Plain Prometheus" snippet."""
    [block] = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", DEPLOYMENT_DOC.read_text(), re.DOTALL)
        if "scrape_configs" in b
    ]
    config: dict[str, Any] = yaml.safe_load(block)
    return config


def test_grafana_s_time_interval_is_the_scrape_interval_of_the_exporter() -> None:
    [endpoint] = yaml.safe_load(SERVICE_MONITOR.read_text())["spec"]["endpoints"]
    [datasource] = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    [job] = docs_scrape_config()["scrape_configs"]
    assert datasource["jsonData"]["timeInterval"] == endpoint["interval"] == job["scrape_interval"]
