"""deploy/kubernetes/sync.py: the base's copies of the dashboards and the PrometheusRule component's copy
of the rule match their sources (the drift test); with sources present the base renders one labelled
ConfigMap per dashboard, and the component, added once by an overlay, the rule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.kubernetes.manifests import (
    BASE,
    KUBERNETES,
    REPO,
    SYNC,
    check_custom_resource,
    of_kind,
    render,
    rendered,
    validate,
)

RULE = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PrometheusRule",
    "metadata": {"name": "fluidity-exporter"},
    "spec": {
        "groups": [
            {
                "name": "fluidity",
                "rules": [{"alert": "FluidityLow", "expr": "fluidity_window_level < 0.9", "for": "10m"}],
            }
        ]
    },
}


def sync(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SYNC), "--root", str(root), *flags], capture_output=True, text=True, check=False
    )


def fake_repo(tmp_path: Path) -> Path:
    """A repo with the Kubernetes folder, a PrometheusRule and two dashboards."""
    shutil.copytree(KUBERNETES, tmp_path / "deploy" / "kubernetes")
    rules = tmp_path / "deploy" / "prometheus"
    rules.mkdir()
    (rules / "prometheus-rule.yaml").write_text(yaml.safe_dump(RULE))
    dashboards = tmp_path / "dashboards"
    dashboards.mkdir()
    (dashboards / "fluidity.json").write_text(json.dumps({"uid": "fluidity", "title": "Fluidity"}))
    (dashboards / "Capacity Search.json").write_text(json.dumps({"uid": "capacity", "title": "Capacity"}))
    return tmp_path


def with_rule(kubernetes: Path, folder: Path) -> Path:
    """An overlay in ``folder``: the base in namespace team-a, with the PrometheusRule component."""
    folder.mkdir(parents=True, exist_ok=True)
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "team-a",
        "resources": [os.path.relpath(kubernetes / "base", folder)],
        "components": [os.path.relpath(kubernetes / "components" / "prometheus-rule", folder)],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return folder


def test_the_committed_copies_match_their_sources() -> None:
    check = sync(REPO, "--check")
    assert check.returncode == 0, check.stderr


def test_the_base_ships_no_rule_and_the_component_adds_it_once(tmp_path: Path) -> None:
    # Every namespace that deploys the base would load another copy of every rule group and alert.
    assert of_kind(rendered(BASE), "PrometheusRule") == []
    resources = render(with_rule(KUBERNETES, tmp_path / "overlay"))
    (rule,) = of_kind(resources, "PrometheusRule")
    check_custom_resource(rule)
    validate(rule)
    source = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus-rule.yaml").read_text())
    assert rule["spec"] == source["spec"]
    assert rule["metadata"]["namespace"] == "team-a"
    assert len(resources) == len(rendered(BASE)) + 1


def test_the_base_ships_a_configmap_per_dashboard() -> None:
    resources = rendered(BASE)
    dashboards = [
        r for r in of_kind(resources, "ConfigMap") if "grafana_dashboard" in r["metadata"]["labels"]
    ]
    assert len(dashboards) == len(list((REPO / "dashboards").glob("*.json")))
    for configmap in dashboards:
        # A client-side `kubectl apply` copies the object into an annotation limited to 256 KiB.
        assert len(json.dumps(configmap)) < 200_000, configmap["metadata"]["name"]


def test_with_sources_the_overlay_renders_the_rule_and_labelled_dashboard_configmaps(tmp_path: Path) -> None:
    root = fake_repo(tmp_path)
    assert sync(root, "--check").returncode == 1
    assert sync(root).returncode == 0
    assert sync(root, "--check").returncode == 0

    resources = render(with_rule(root / "deploy" / "kubernetes", root / "overlay"))
    for resource in resources:
        validate(resource)
    (rule,) = of_kind(resources, "PrometheusRule")
    check_custom_resource(rule)
    assert rule["spec"] == RULE["spec"]
    dashboards = {
        r["metadata"]["name"]: r
        for r in of_kind(resources, "ConfigMap")
        if "grafana_dashboard" in r["metadata"]["labels"]
    }
    # Stable names (no hash suffix): the Grafana sidecar would load a left-behind copy as a duplicate.
    assert set(dashboards) == {"fluidity-dashboard-fluidity", "fluidity-dashboard-capacity-search"}
    capacity = dashboards["fluidity-dashboard-capacity-search"]
    assert capacity["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert capacity["metadata"]["annotations"]["grafana_folder"] == "Fluidity"
    assert json.loads(capacity["data"]["Capacity Search.json"])["uid"] == "capacity"
    # The standalone overlay inherits the dashboards (the rule only with the component).
    overlay = render(root / "deploy" / "kubernetes" / "overlays" / "standalone")
    assert of_kind(overlay, "PrometheusRule") == []
    assert (
        len([r for r in of_kind(overlay, "ConfigMap") if "grafana_dashboard" in r["metadata"]["labels"]]) == 2
    )


def test_check_names_every_changed_missing_or_stale_copy(tmp_path: Path) -> None:
    root = fake_repo(tmp_path)
    sync(root)
    generated = root / "deploy" / "kubernetes" / "base" / "generated"
    (root / "dashboards" / "fluidity.json").write_text("{}")
    (root / "dashboards" / "new.json").write_text("{}")
    (generated / "dashboards" / "stale.json").write_text("{}")

    check = sync(root, "--check")
    assert check.returncode == 1
    named = {line.split(":")[0] for line in check.stderr.splitlines() if line.endswith("out of date")}
    prefix = "deploy/kubernetes/base/generated/"
    assert named == {
        prefix + "dashboards/fluidity.json",
        prefix + "dashboards/new.json",
        prefix + "dashboards/stale.json",
        prefix + "kustomization.yaml",
    }
    assert "run: python deploy/kubernetes/sync.py" in check.stderr
    sync(root)
    assert not (generated / "dashboards" / "stale.json").exists()
    assert sync(root, "--check").returncode == 0
