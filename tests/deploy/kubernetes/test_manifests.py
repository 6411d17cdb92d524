"""The Kustomize base (vLLM + exporter sidecar) and the standalone overlay, rendered by ``kubectl
kustomize``: every resource valid, every container locked down, the pieces pointing at each other, and
the exporter config in the ConfigMap accepted by ``fluidity-exporter check-config``."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from exporter.settings import SettingsError, load_config_file
from exporter.settings.reader import parse_duration
from tests.deploy.kubernetes.manifests import (
    BASE,
    CAPACITY_SEARCH,
    EXPORTER_CONTAINER,
    EXPORTER_PORT,
    JOBS_PORT,
    KUBERNETES,
    KUSTOMIZATIONS,
    REPO,
    STANDALONE,
    STATE_DIR,
    Resource,
    assert_locked_down,
    container,
    env_from_secret,
    exporter_config,
    has,
    local_secret,
    of_kind,
    one,
    pod_specs,
    reading_local_secrets,
    render,
    rendered,
    secret_files,
    validate,
)

FOLDERS = pytest.mark.parametrize("folder", [BASE, STANDALONE], ids=["base", "standalone"])
SIDECAR_PATCH = KUBERNETES / "examples" / "sidecar-patch.yaml"
KNOWN_KINDS = {
    "ConfigMap",
    "Deployment",
    "Service",
    "ServiceMonitor",
    "PrometheusRule",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
}


@FOLDERS
def test_every_resource_is_valid(folder: Path) -> None:
    resources = rendered(folder)
    assert {r["kind"] for r in resources} <= KNOWN_KINDS
    for resource in resources:
        validate(resource)


@FOLDERS
def test_every_container_runs_non_root_read_only_without_capabilities(folder: Path) -> None:
    for name, pod in pod_specs(rendered(folder)):
        assert pod.get("automountServiceAccountToken") is False, name
        assert has(pod, default_container(rendered(folder), name)), name
        for box in pod["containers"]:
            assert_locked_down(pod, box)


@FOLDERS
def test_the_exporter_is_probed_on_its_own_endpoints_and_writes_only_its_state_dir(folder: Path) -> None:
    resources = rendered(folder)
    ((_, pod),) = [(n, p) for n, p in pod_specs(resources) if has(p, EXPORTER_CONTAINER)]
    exporter = container(pod, EXPORTER_CONTAINER)
    assert exporter["ports"] == [
        {"name": "metrics", "containerPort": EXPORTER_PORT},
        {"name": "jobs", "containerPort": JOBS_PORT},
    ]
    assert exporter["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert f"--web.listen-address=0.0.0.0:{EXPORTER_PORT}" in exporter["args"]

    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in exporter["volumeMounts"]}
    assert "emptyDir" in volumes[mounts[STATE_DIR]["name"]]
    config_file = flag(exporter["args"], "--config.file")
    config_mount = mounts[str(Path(config_file).parent)]
    assert config_mount["readOnly"] is True
    configmap = one(resources, "ConfigMap", "fluidity-exporter-config")
    assert volumes[config_mount["name"]]["configMap"]["name"] == configmap["metadata"]["name"]
    assert Path(config_file).name in configmap["data"]

    config = yaml.safe_load(exporter_config(resources))
    assert config["global"]["state_dir"] == STATE_DIR
    assert config["global"]["listen_address"].endswith(f":{EXPORTER_PORT}")


def test_the_sidecar_never_gates_vllms_readiness() -> None:
    """A pod is Ready only when every container is (a native sidecar's readinessProbe counts too), so an
    exporter readinessProbe in vLLM's pod would take the replica out of its Service: liveness only."""
    sidecar_layouts = [pod for _, pod in pod_specs(rendered(BASE))]
    sidecar_layouts.append(yaml.safe_load(SIDECAR_PATCH.read_text())["spec"]["template"]["spec"])
    for pod in sidecar_layouts:
        exporter = container(pod, EXPORTER_CONTAINER)
        assert "readinessProbe" not in exporter
        assert exporter["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
        assert EXPORTER_CONTAINER not in [c["name"] for c in pod.get("initContainers", [])]


def test_the_standalone_exporter_is_ready_only_once_its_config_loaded() -> None:
    ((_, pod),) = pod_specs(rendered(STANDALONE))
    exporter = container(pod, EXPORTER_CONTAINER)
    assert exporter["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}


@FOLDERS
def test_a_config_change_reloads_the_exporter_and_leaves_the_pods_alone(folder: Path, tmp_path: Path) -> None:
    """A changed config.yaml updates the ConfigMap in place; the pod template (vLLM's pod, in the base)
    stays the same, so nothing rolls, and the exporter watches the mounted file."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    config = copy / folder.relative_to(KUBERNETES) / "config.yaml"
    config.write_text(config.read_text().replace("requests_per_run: 4", "requests_per_run: 3"))
    before, after = rendered(folder), render(copy / folder.relative_to(KUBERNETES))
    assert exporter_config(after) != exporter_config(before)
    assert of_kind(after, "Deployment") == of_kind(before, "Deployment")
    ((_, pod),) = [(n, p) for n, p in pod_specs(before) if has(p, EXPORTER_CONTAINER)]
    assert (
        parse_duration(flag(container(pod, EXPORTER_CONTAINER)["args"], "--config.auto-reload-interval")) > 0
    )


@FOLDERS
def test_the_config_reads_exactly_the_secret_files_the_container_mounts(folder: Path, tmp_path: Path) -> None:
    """Secrets are files of the Secret's volume, never environment variables (a job's --workers
    processes inherit the environment)."""
    resources = rendered(folder)
    ((_, pod),) = [(n, p) for n, p in pod_specs(resources) if has(p, EXPORTER_CONTAINER)]
    exporter = container(pod, EXPORTER_CONTAINER)
    assert env_from_secret(exporter) == {}
    files = secret_files(pod, exporter)
    text = exporter_config(resources)
    assert "{env:" not in text
    assert set(re.findall(r"\{file: (\S+?)\}", text)) == set(files)
    assert {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v} == {"fluidity-exporter"}

    # What `fluidity-exporter check-config` and `run` load, with the files the container gets.
    folder_here = tmp_path / "secrets"
    config = tmp_path / "config.yaml"
    config.write_text(reading_local_secrets(text, folder_here))
    with pytest.raises(SettingsError) as error:  # without the Secret it refuses to start, naming each
        load_config_file(config, environ={})
    assert len(error.value.problems) == len(files)
    assert all(any(Path(path).name in p for path in files) for p in error.value.problems)
    for path, key in files.items():
        local_secret(path, folder_here).write_text(f"value-of-{key}\n")
    loaded = load_config_file(config, environ={})
    assert [t.api_key.reveal() for t in loaded.targets if t.api_key] == ["value-of-vllm-api-key"]
    assert loaded.jobs.api_token is not None and loaded.jobs.api_token.reveal() == "value-of-jobs-token"
    assert loaded.global_.probe_token is not None


def test_the_base_runs_vllm_on_one_gpu_and_the_exporter_probes_it_over_loopback() -> None:
    resources = rendered(BASE)
    ((_, pod),) = pod_specs(resources)
    assert [c["name"] for c in pod["containers"]] == ["vllm", EXPORTER_CONTAINER]
    vllm = container(pod, "vllm")
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert any(arg.startswith("--model=") for arg in vllm["args"])
    port = vllm["ports"][0]["containerPort"]
    assert f"--port={port}" in vllm["args"]

    (target,) = yaml.safe_load(exporter_config(resources))["targets"]
    assert target["url"] == f"http://127.0.0.1:{port}"
    assert target["engine_metrics"]["url"] == f"http://127.0.0.1:{port}/metrics"
    # vLLM's key (its VLLM_API_KEY) is the one the exporter sends.
    key = secret_files(pod, container(pod, EXPORTER_CONTAINER))[target["api_key"]["file"]]
    assert env_from_secret(vllm)["VLLM_API_KEY"] == {"name": "fluidity-exporter", "key": key}
    assert one(resources, "Service", "vllm")["spec"]["ports"][0]["targetPort"] == "http"


def test_the_standalone_overlay_is_the_exporter_alone_probing_a_remote_endpoint() -> None:
    resources = rendered(STANDALONE)
    (deployment,) = of_kind(resources, "Deployment")
    assert deployment["metadata"]["name"] == "fluidity-exporter"
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == [EXPORTER_CONTAINER]
    assert "nvidia.com/gpu" not in str(deployment)
    mounted = {m["name"] for c in pod["containers"] for m in c["volumeMounts"]}
    assert {v["name"] for v in pod["volumes"]} == mounted  # no volume left over from vLLM
    services = of_kind(resources, "Service")
    assert [s["metadata"]["name"] for s in services] == ["fluidity-exporter", "fluidity-exporter-jobs"]
    pods = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(s["spec"]["selector"].items() <= pods.items() for s in services)  # the exporter's own pods
    (target,) = yaml.safe_load(exporter_config(resources))["targets"]
    assert not target["url"].startswith("http://127.0.0.1")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


@FOLDERS
def test_the_service_and_the_servicemonitor_reach_the_exporter(folder: Path) -> None:
    resources = rendered(folder)
    service = one(resources, "Service", "fluidity-exporter")
    pods = [d["spec"]["template"]["metadata"]["labels"] for d in of_kind(resources, "Deployment")]
    selected = [p for p in pods if service["spec"]["selector"].items() <= p.items()]
    assert len(selected) == 1
    assert service["spec"]["ports"] == [{"name": "metrics", "port": EXPORTER_PORT, "targetPort": "metrics"}]

    monitor = one(resources, "ServiceMonitor", "fluidity-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


@FOLDERS
def test_no_secret_is_ever_rendered(folder: Path) -> None:
    assert of_kind(rendered(folder), "Secret") == []


# The one container that takes a secret from a variable: vLLM's own, which reads its key only from
# VLLM_API_KEY or --api-key (argv, where `ps` shows it); it is the engine's process, not ours.
ENGINE_SECRET_ENV = {"vllm": {"VLLM_API_KEY"}}


def workload_pods() -> list[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every workload a user applies or creates, and of the sidecar patch."""
    pods = [
        (f"{name}: {r['kind']} {r['metadata']['name']}", r["spec"]["template"]["spec"])
        for name, folder in KUSTOMIZATIONS.items()
        for r in rendered(folder)
        if "template" in r.get("spec", {})
    ]
    patch = yaml.safe_load(SIDECAR_PATCH.read_text())["spec"]["template"]["spec"]
    return [*pods, ("sidecar patch", patch)]


def test_no_container_of_ours_gets_a_secret_from_its_environment() -> None:
    """Secrets reach the exporter and its shards as files: a variable is inherited by every process a
    container starts (a job's --workers, anything run by `kubectl exec`) and shown by `kubectl describe`."""
    pods = workload_pods()
    assert {where.split(":")[0] for where, _ in pods} >= {*KUSTOMIZATIONS, "sidecar patch"}
    for where, pod in pods:
        for box in [*pod.get("initContainers", []), *pod["containers"]]:
            at = f"{where}, container {box['name']}"
            assert not [e for e in box.get("envFrom", []) if "secretRef" in e], at
            assert set(env_from_secret(box)) <= ENGINE_SECRET_ENV.get(box["name"], set()), at


def test_the_secret_example_is_valid_holds_every_key_used_and_only_placeholders() -> None:
    example = yaml.safe_load((KUBERNETES / "secret.example.yaml").read_text())
    validate(example)
    pods = [
        workload["spec"]["template"]["spec"]
        for folder in KUSTOMIZATIONS.values()
        for workload in of_kind(rendered(folder), "Deployment") + of_kind(rendered(folder), "Job")
    ]
    used = {
        key
        for pod in pods
        for box in pod["containers"]
        for key in [ref["key"] for ref in env_from_secret(box).values()]
        + list(secret_files(pod, box).values())
    }
    assert set(example["stringData"]) == used
    assert all(value.startswith("REPLACE-ME") for value in example["stringData"].values())
    for kustomization in KUBERNETES.rglob("kustomization.yaml"):
        assert "secret.example" not in str(yaml.safe_load(kustomization.read_text())), kustomization


def test_the_sidecar_patch_example_adds_a_locked_down_exporter_to_an_existing_deployment(
    tmp_path: Path,
) -> None:
    """docs/deployment.md's recipe, on a root-running vLLM Deployment with no securityContext."""
    existing = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "my-vllm"},
        "spec": {
            "selector": {"matchLabels": {"app": "my-vllm"}},
            "template": {
                "metadata": {"labels": {"app": "my-vllm"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
            },
        },
    }
    (tmp_path / "my-vllm.yaml").write_text(yaml.safe_dump(existing))
    (tmp_path / "sidecar-patch.yaml").write_text(SIDECAR_PATCH.read_text())
    (tmp_path / "sidecar-podmonitor.yaml").write_text(
        (KUBERNETES / "examples" / "sidecar-podmonitor.yaml").read_text()
    )
    (tmp_path / "config.yaml").write_text((BASE / "config.yaml").read_text())
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["my-vllm.yaml", "sidecar-podmonitor.yaml"],
                "configMapGenerator": [{"name": "fluidity-exporter-config", "files": ["config.yaml"]}],
                "patches": [
                    {"path": "sidecar-patch.yaml", "target": {"kind": "Deployment", "name": "my-vllm"}}
                ],
            }
        )
    )
    resources = render(tmp_path)
    for resource in resources:
        validate(resource)
    ((_, pod),) = pod_specs(resources)
    assert sorted(c["name"] for c in pod["containers"]) == [EXPORTER_CONTAINER, "vllm"]
    assert "securityContext" not in pod  # the recipe must not depend on the pod's settings
    assert_locked_down(pod, container(pod, EXPORTER_CONTAINER))
    configmap = one(resources, "ConfigMap", "fluidity-exporter-config")
    (config_volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert config_volume["configMap"]["name"] == configmap["metadata"]["name"]
    # The PodMonitor scrapes the patched pods' exporter port, with no Service in between.
    (monitor,) = of_kind(resources, "PodMonitor")
    template = one(resources, "Deployment", "my-vllm")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    exporter_ports = [p["name"] for p in container(pod, EXPORTER_CONTAINER)["ports"]]
    assert exporter_ports == ["metrics", "jobs"]  # the jobs API apart, never scraped
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"


def default_container(resources: tuple[Resource, ...], deployment: str) -> str:
    """The container ``kubectl logs`` and ``exec`` pick without ``-c``."""
    template = one(resources, "Deployment", deployment)["spec"]["template"]
    return str(template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"])


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def test_the_capacity_search_job_example_posts_to_the_exporter_with_the_secret_token() -> None:
    (job,) = of_kind(rendered(CAPACITY_SEARCH), "Job")
    validate(job)
    pod = job["spec"]["template"]["spec"]
    (trigger,) = pod["containers"]
    assert_locked_down(pod, trigger)
    # The token is a file of the Secret's volume: in no environment variable and on no command line.
    assert env_from_secret(trigger) == {}
    token_file, address, text = trigger["args"]
    assert secret_files(pod, trigger) == {token_file: "jobs-token"}

    url = urllib.parse.urlsplit(address)
    service = one(rendered(BASE), "Service", url.hostname or "")
    assert [p["port"] for p in service["spec"]["ports"]] == [url.port]
    openapi = json.loads((REPO / "exporter" / "web" / "openapi.json").read_text())
    assert "post" in openapi["paths"][url.path]
    body = json.loads(text)
    config = yaml.safe_load(exporter_config(rendered(BASE)))
    (target,) = [t for t in config["targets"] if t["name"] == body["target"]]
    assert body["module"] in target["modules"]


async def test_the_capacity_search_jobs_command_sends_the_token_from_its_file(tmp_path: Path) -> None:
    """The trigger's command and args, word for word but for the file's and the exporter's address,
    against a jobs API on loopback: the bearer token read from the file, the body as written."""
    (job,) = of_kind(rendered(CAPACITY_SEARCH), "Job")
    (trigger,) = job["spec"]["template"]["spec"]["containers"]
    seen: list[tuple[str, bytes]] = []

    async def capacity(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization", ""), await request.read()))
        return web.json_response({"id": "j1"}, status=202, headers={"Location": "/api/v1/jobs/j1"})

    app = web.Application()
    app.router.add_post("/api/v1/jobs/capacity", capacity)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    token = tmp_path / "jobs-token"
    token.write_text("the-jobs-token\n")  # as a Secret created from a file may hold it
    _, address, body = trigger["args"]
    path = urllib.parse.urlsplit(address).path
    args = [str(token), f"http://127.0.0.1:{port}{path}", body]
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *trigger["command"][1:], *args, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        await runner.cleanup()
    assert trigger["command"][0] == "python" and process.returncode == 0
    assert out.decode().splitlines()[0] == "202 /api/v1/jobs/j1"
    assert seen == [("Bearer the-jobs-token", body.encode())]
    assert not any("the-jobs-token" in arg for arg in args)
