"""The operator's knobs, rendered: the NetworkPolicy admits the exporter's metrics port only from the
monitoring namespace and its jobs port only from this copy's job triggers (and, sharded, the shard port only from its shard pods), the
PodDisruptionBudget and the ServiceAccount cover the pods, GPU nodes' taint is tolerated, every
emptyDir is bounded, and docs/deployment.md's scheduling patch renders valid."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.kubernetes.manifests import (
    BASE,
    CAPACITY_SEARCH,
    KUBERNETES,
    KUSTOMIZATIONS,
    REPO,
    SHARDED,
    SHARDS,
    STANDALONE,
    Resource,
    exporter_config,
    of_kind,
    one,
    render,
    rendered,
    validate,
)

MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def policy(resources: tuple[Resource, ...]) -> dict[str, Any]:
    spec: dict[str, Any] = one(resources, "NetworkPolicy", "fluidity-exporter")["spec"]
    return spec


def peers(spec: dict[str, Any], port: str) -> list[dict[str, Any]] | None:
    """Who the policy admits to the named port: a list of peers, or ``None`` for anyone."""
    admitted: list[dict[str, Any]] = []
    for rule in spec["ingress"]:
        if port not in [p["port"] for p in rule.get("ports", [])]:
            continue
        if "from" not in rule:
            return None
        admitted += rule["from"]
    return admitted


def template_labels(resources: tuple[Resource, ...], kind: str) -> dict[str, str]:
    (workload,) = of_kind(resources, kind)
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def admits(peer: dict[str, Any], pod: dict[str, str]) -> bool:
    """A same-namespace pod peer that selects ``pod``'s labels."""
    return set(peer) == {"podSelector"} and peer["podSelector"]["matchLabels"].items() <= pod.items()


def test_only_monitoring_and_this_copys_job_triggers_reach_the_exporters_port() -> None:
    trigger = template_labels(rendered(CAPACITY_SEARCH), "Job")
    for folder in (BASE, STANDALONE, SHARDED):
        resources = rendered(folder)
        spec = policy(resources)
        assert spec["policyTypes"] == ["Ingress"]
        (deployment,) = of_kind(resources, "Deployment")
        pods = deployment["spec"]["template"]["metadata"]["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= pods.items(), folder.name
        # Prometheus reaches the metrics port alone; the job triggers the jobs port alone.
        assert peers(spec, "metrics") == [MONITORING], folder.name
        jobs = peers(spec, "jobs")
        assert jobs is not None and len(jobs) == 1 and admits(jobs[0], trigger), folder.name
        assert not admits(jobs[0], {**trigger, "app.kubernetes.io/instance": "another-copy"})
    assert peers(policy(rendered(BASE)), "http") is None  # vLLM's clients, as before
    assert peers(policy(rendered(STANDALONE)), "http") == []


def test_the_shard_port_admits_this_copys_shard_pods_only() -> None:
    (shard_peer,) = peers(policy(rendered(SHARDED)), "shards") or [{}]
    assert admits(shard_peer, template_labels(rendered(SHARDS), "Job"))
    assert not admits(shard_peer, template_labels(rendered(CAPACITY_SEARCH), "Job"))
    assert peers(policy(rendered(BASE)), "shards") == []


def test_the_disruption_budget_and_service_account_cover_the_pods() -> None:
    for folder in (BASE, STANDALONE, SHARDED):
        resources = rendered(folder)
        (deployment,) = of_kind(resources, "Deployment")
        (budget,) = of_kind(resources, "PodDisruptionBudget")
        assert budget["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
        pod = deployment["spec"]["template"]["spec"]
        account = one(resources, "ServiceAccount", pod["serviceAccountName"])
        assert account["automountServiceAccountToken"] is False
        assert pod["automountServiceAccountToken"] is False


def test_gpu_nodes_taint_is_tolerated_where_a_gpu_is_asked_for() -> None:
    for folder in (BASE, STANDALONE, SHARDED):
        (deployment,) = of_kind(rendered(folder), "Deployment")
        pod = deployment["spec"]["template"]["spec"]
        asks_gpu = "nvidia.com/gpu" in str(pod["containers"])
        assert pod.get("tolerations", []) == [GPU_TAINT] * asks_gpu, folder.name


def test_every_emptydir_is_bounded() -> None:
    for name, folder in KUSTOMIZATIONS.items():
        for workload in of_kind(rendered(folder), "Deployment") + of_kind(rendered(folder), "Job"):
            for volume in workload["spec"]["template"]["spec"].get("volumes", []):
                if "emptyDir" in volume:
                    assert (volume["emptyDir"] or {}).get("sizeLimit"), f"{name}: volume {volume['name']}"


def test_the_docs_scheduling_patch_renders_valid(tmp_path: Path) -> None:
    """docs/deployment.md's overlay setting priorityClassName, nodeSelector and the models volume."""
    (block,) = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "deployment.md").read_text(), re.DOTALL)
        if "priorityClassName" in b
    ]
    shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    overlay = tmp_path / "kubernetes" / "overlays" / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(block)
    resources = render(overlay)
    for resource in resources:
        validate(resource)
    (deployment,) = of_kind(resources, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] and pod["nodeSelector"]
    (models,) = [v for v in pod["volumes"] if v["name"] == "models"]
    assert (
        models["emptyDir"]["sizeLimit"]
        == yaml.safe_load(block)["patches"][0]["patch"].split("sizeLimit: ")[1].split("}")[0]
    )
    assert pod["tolerations"][0] == GPU_TAINT  # the base's toleration kept


def test_the_jobs_api_listens_apart_from_what_prometheus_scrapes() -> None:
    """The jobs API can saturate the replica: the Service the ServiceMonitor selects exposes the metrics
    port alone, and the jobs port (the config's own address) has a Service of its own."""
    for folder in (BASE, STANDALONE, SHARDED):
        resources = rendered(folder)
        config = yaml.safe_load(exporter_config(resources))
        host_port = config["global"]["jobs_listen_address"]
        (deployment,) = of_kind(resources, "Deployment")
        (exporter,) = [
            c
            for c in deployment["spec"]["template"]["spec"]["containers"]
            if c["name"] == "fluidity-exporter"
        ]
        ports = {p["name"]: p["containerPort"] for p in exporter["ports"]}
        assert host_port == f"0.0.0.0:{ports['jobs']}" and ports["metrics"] != ports["jobs"], folder.name
        scraped = one(resources, "Service", "fluidity-exporter")
        monitor = one(resources, "ServiceMonitor", "fluidity-exporter")
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert [p["name"] for p in scraped["spec"]["ports"]] == ["metrics"], folder.name
        jobs = one(resources, "Service", "fluidity-exporter-jobs")
        assert [p["targetPort"] for p in jobs["spec"]["ports"]] == ["jobs"], folder.name
        assert not selector.items() <= jobs["metadata"]["labels"].items(), folder.name
