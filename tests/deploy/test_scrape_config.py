"""The exporter's scrape settings stated in several places agree: the ServiceMonitor, the plain-Prometheus
scrape config of docs/deployment.md, and Grafana's data source (whose timeInterval sets the dashboards'
$__rate_interval); and the docs' scrape config keeps the exporter's port and no other pod's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kubernetes.manifests import BASE, EXPORTER_CONTAINER, STANDALONE, of_kind, rendered

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


def kept(relabel_configs: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """Whether the keep and drop steps of ``relabel_configs`` keep a discovered target of ``labels``
    (Prometheus' defaults: separator ";", the regex anchored at both ends)."""
    for step in relabel_configs:
        action = step.get("action", "replace")
        if action not in ("keep", "drop"):
            continue
        value = step.get("separator", ";").join(labels.get(name, "") for name in step["source_labels"])
        if bool(re.fullmatch(step.get("regex", "(.*)"), value)) != (action == "keep"):
            return False
    return True


def discovered(pod: dict[str, Any]) -> list[dict[str, str]]:
    """The targets Kubernetes pod discovery makes of a pod template: one per container port."""
    return [
        {
            "__meta_kubernetes_pod_container_name": box["name"],
            "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
            **{f"__meta_kubernetes_pod_label_{k}": v for k, v in pod["metadata"]["labels"].items()},
        }
        for box in pod["spec"]["containers"]
        for port in box.get("ports", [])
    ]


@pytest.mark.parametrize("folder", [BASE, STANDALONE], ids=["base", "standalone"])
def test_the_docs_scrape_config_keeps_the_exporter_and_no_other_metrics_port(folder: Path) -> None:
    [job] = docs_scrape_config()["scrape_configs"]
    pods = [d["spec"]["template"] for d in of_kind(rendered(folder), "Deployment")]
    targets = [target for pod in pods for target in discovered(pod)]
    exporter = [t for t in targets if t["__meta_kubernetes_pod_container_name"] == EXPORTER_CONTAINER]
    metrics = [t for t in exporter if t["__meta_kubernetes_pod_container_port_name"] == "metrics"]
    assert len(exporter) == 2  # the metrics port and the jobs port, which serves no /metrics
    assert [t for t in targets if kept(job["relabel_configs"], t)] == metrics != []
    # Another application's pod with a port named metrics, in the same cluster.
    other = {
        "__meta_kubernetes_pod_container_name": "app",
        "__meta_kubernetes_pod_container_port_name": "metrics",
    }
    assert not kept(job["relabel_configs"], other)
