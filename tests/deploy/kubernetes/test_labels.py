"""Labels and selectors: every resource carries the recommended ``app.kubernetes.io/*`` labels; the
version label is the image's tag; two copies of the base in one namespace (the docs' overlay recipe)
select only their own pods and Services; a ``release`` label set in an overlay reaches the monitors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kubernetes.manifests import (
    KUBERNETES,
    KUSTOMIZATIONS,
    Resource,
    common_images,
    of_kind,
    render,
    rendered,
)

FOLDERS = pytest.mark.parametrize("folder", list(KUSTOMIZATIONS.values()), ids=list(KUSTOMIZATIONS))
EVERYWHERE = ("instance", "version", "part-of", "managed-by")
OWN_KINDS = {
    "Job",
    "Deployment",
    "Service",
    "ServiceMonitor",
    "PodMonitor",
    "PodDisruptionBudget",
    "NetworkPolicy",
}
POD_SELECTORS = {"Deployment", "PodDisruptionBudget", "NetworkPolicy", "Service"}
# docs/deployment.md's recipe for a second copy in the namespace.
SECOND_COPY = {
    "resources": ["../../base"],
    "nameSuffix": "-b",
    "labels": [{"pairs": {"app.kubernetes.io/instance": "vllm-b"}, "includeSelectors": True}],
}
# docs/deployment.md's four lines for kube-prometheus-stack's release label.
RELEASE = {
    "resources": ["../../base"],
    "labels": [
        {
            "pairs": {"release": "my-prometheus"},
            "fields": [
                {"kind": kind, "path": "metadata/labels", "create": True}
                for kind in ("ServiceMonitor", "PodMonitor")
            ],
        }
    ],
}


def labels(resource: Resource) -> dict[str, str]:
    found: dict[str, str] = resource["metadata"].get("labels", {})
    return found


def recommended(resource: Resource, *names: str) -> set[str]:
    """Which of the ``app.kubernetes.io/<name>`` labels ``resource`` lacks."""
    return {name for name in names if not labels(resource).get(f"app.kubernetes.io/{name}")}


@FOLDERS
def test_every_resource_carries_the_recommended_labels(folder: Path) -> None:
    for resource in rendered(folder):
        name = f"{resource['kind']} {resource['metadata']['name']}"
        wanted = EVERYWHERE + ("name", "component") * (resource["kind"] in OWN_KINDS)
        assert not recommended(resource, *wanted), name
        assert labels(resource)["app.kubernetes.io/managed-by"] == "kustomize", name
    for workload in of_kind(rendered(folder), "Deployment") + of_kind(rendered(folder), "Job"):
        assert not recommended(workload["spec"]["template"], "name", "instance", "version", "component")


@FOLDERS
def test_the_version_label_is_the_exporters_image_tag(folder: Path) -> None:
    tag = common_images()["fluidity-exporter"]
    for resource in rendered(folder):
        assert labels(resource)["app.kubernetes.io/version"] == tag, resource["metadata"]["name"]


def selector(resource: Resource) -> dict[str, str] | None:
    """The labels ``resource`` selects pods or Services by."""
    spec: dict[str, Any] = resource.get("spec", {})
    kind = resource["kind"]
    if kind == "Service":
        return dict(spec["selector"])
    if kind == "NetworkPolicy":
        return dict(spec["podSelector"]["matchLabels"])
    if kind in {"Deployment", "PodDisruptionBudget", "ServiceMonitor", "PodMonitor"}:
        return dict(spec["selector"]["matchLabels"])
    return None


@FOLDERS
def test_every_selector_selects_this_copy_only(folder: Path) -> None:
    for resource in rendered(folder):
        wanted = selector(resource)
        if wanted is not None:
            assert wanted.get("app.kubernetes.io/instance"), (
                f"{resource['kind']} {resource['metadata']['name']}"
            )


def pod_labels(resources: list[Resource]) -> list[tuple[str, dict[str, str]]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["metadata"]["labels"])
        for d in of_kind(resources, "Deployment")
    ]


def selected(wanted: dict[str, str], candidates: list[tuple[str, dict[str, str]]]) -> list[str]:
    return [name for name, have in candidates if wanted.items() <= have.items()]


def two_copies(tmp_path: Path, overlay: dict[str, Any]) -> tuple[list[Resource], list[Resource]]:
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    (copy / "overlays" / "second").mkdir()
    (copy / "overlays" / "second" / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return render(copy / "base"), render(copy / "overlays" / "second")


def test_two_copies_in_one_namespace_select_only_their_own_pods_and_services(tmp_path: Path) -> None:
    first, second = two_copies(tmp_path, SECOND_COPY)
    names = {r["metadata"]["name"] for r in first}
    assert not names & {r["metadata"]["name"] for r in second}  # no object overwrites the other's
    pods = pod_labels(first) + pod_labels(second)
    services = [(s["metadata"]["name"], labels(s)) for s in of_kind(first + second, "Service")]
    for own, resources in (("vllm", first), ("vllm-b", second)):
        own_pods = [name for name, have in pods if have["app.kubernetes.io/instance"] == own]
        own_services = [name for name, have in services if have["app.kubernetes.io/instance"] == own]
        for resource in resources:
            wanted = selector(resource)
            if wanted is None:
                continue
            where = f"{resource['kind']} {resource['metadata']['name']}"
            if resource["kind"] in POD_SELECTORS:
                assert selected(wanted, pods) == own_pods, where
            else:
                assert set(selected(wanted, services)) <= set(own_services) and selected(wanted, services), (
                    where
                )


def test_a_release_label_set_in_an_overlay_reaches_the_monitors_only(tmp_path: Path) -> None:
    _, resources = two_copies(tmp_path, RELEASE)
    marked = {
        (r["kind"], r["metadata"]["name"]) for r in resources if labels(r).get("release") == "my-prometheus"
    }
    assert marked == {(r["kind"], r["metadata"]["name"]) for r in of_kind(resources, "ServiceMonitor")}
    for deployment in of_kind(resources, "Deployment"):
        assert "release" not in deployment["spec"]["template"]["metadata"]["labels"]
