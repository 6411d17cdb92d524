"""The sharded deployment: the overlay (the daemon listening for its shards) and the Indexed Job whose
pods are the shards, rendered and validated, and pointing at each other: the Job's pods reach the
daemon's shard port through the Service, present the token the daemon expects, are as many as the
config says, and reach vLLM at the URL the config gives them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from exporter.load.shards.pool import ShardPool
from exporter.load.shards.tasks import API_KEY_ENV, TOKEN_ENV
from exporter.settings import load_config_file
from tests.deploy.kubernetes.manifests import (
    BASE,
    EXPORTER_CONTAINER,
    KUBERNETES,
    REPO,
    SHARDED,
    SHARDS,
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
from tests.support.wait import wait_for


def job() -> dict[str, Any]:
    """The shards' Job, as ``kubectl create -k deploy/kubernetes/shards`` creates it."""
    (loaded,) = of_kind(rendered(SHARDS), "Job")
    return loaded


def sharded_config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(exporter_config(rendered(SHARDED)))
    return loaded


def test_the_overlay_and_the_job_are_valid_and_locked_down() -> None:
    for resource in rendered(SHARDED):
        validate(resource)
    validate(job())
    pod = job()["spec"]["template"]["spec"]
    (shard,) = pod["containers"]
    assert_locked_down(pod, shard)
    assert pod["automountServiceAccountToken"] is False
    assert shard["resources"]["requests"]["cpu"] == shard["resources"]["limits"]["cpu"] == "1"


def test_the_job_is_indexed_with_one_pod_per_configured_shard() -> None:
    spec = job()["spec"]
    count = sharded_config()["jobs"]["shards"]["count"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == count
    assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"


def test_the_pods_reach_the_daemons_shard_port_with_its_token() -> None:
    resources = rendered(SHARDED)
    (shard,) = job()["spec"]["template"]["spec"]["containers"]
    url = urllib.parse.urlsplit(
        next(a for a in shard["args"] if a.startswith("--coordinator=")).split("=", 1)[1]
    )
    service = one(resources, "Service", url.hostname or "")
    (port,) = service["spec"]["ports"]
    assert port["port"] == url.port
    ((_, pod),) = [(n, p) for n, p in pod_specs(resources) if has(p, EXPORTER_CONTAINER)]
    assert service["spec"]["selector"].items() <= pod_labels(resources).items()
    exporter = container(pod, EXPORTER_CONTAINER)
    ports = {p["name"]: p["containerPort"] for p in exporter["ports"]}
    listen = sharded_config()["jobs"]["shards"]["listen"]
    assert ports[port["targetPort"]] == int(listen.rpartition(":")[2])
    # The shards present a token of their own (jobs.shards.token), from the Secret key the daemon reads
    # it from: not the jobs token, which would let a shard pod start searches.
    daemon_files = secret_files(pod, exporter)
    jobs = sharded_config()["jobs"]
    shard_key = daemon_files[jobs["shards"]["token"]["file"]]
    shard_files = secret_files(job()["spec"]["template"]["spec"], shard)
    assert shard_files[flag(shard["args"], "--token-file")] == shard_key
    assert shard_key != daemon_files[jobs["api_token"]["file"]]
    (target,) = sharded_config()["targets"]
    api_key = daemon_files[target["api_key"]["file"]]
    assert shard_files[flag(shard["args"], "--api-key-file")] == api_key
    assert env_from_secret(shard) == {}  # files, never variables


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def pod_labels(resources: tuple[dict[str, Any], ...]) -> dict[str, str]:
    (deployment,) = of_kind(resources, "Deployment")
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_pods_reach_vllm_through_its_service() -> None:
    urls = sharded_config()["jobs"]["shards"]["target_urls"]
    for target, url in urls.items():
        parts = urllib.parse.urlsplit(url)
        service = one(rendered(SHARDED), "Service", parts.hostname or "")
        assert parts.port in [p["port"] for p in service["spec"]["ports"]], target


def test_the_overlays_config_is_the_bases_plus_shards(tmp_path: Path) -> None:
    base = yaml.safe_load(exporter_config(rendered(BASE)))
    sharded = sharded_config()
    shards = sharded["jobs"].pop("shards")
    assert sharded == base
    ((_, pod),) = pod_specs(rendered(SHARDED))
    for file, key in secret_files(pod, container(pod, EXPORTER_CONTAINER)).items():
        local_secret(file, tmp_path).write_text(f"value-of-{key}\n")
    path = tmp_path / "config.yaml"
    path.write_text(reading_local_secrets(exporter_config(rendered(SHARDED)), tmp_path))
    loaded = load_config_file(path, environ={})
    assert loaded.jobs.shards is not None and loaded.jobs.shards.count == shards["count"]
    assert loaded.jobs.shards.url_for("vllm") == shards["target_urls"]["vllm"]
    credential = loaded.jobs.shards.credential(loaded.jobs.api_token)
    assert credential is not None and credential.reveal() == "value-of-shard-token"


async def test_the_pods_command_serves_as_a_shard_here(tmp_path: Path) -> None:
    """The Job's container command and args, word for word but for the coordinator's address and the
    Secret's folder, against a coordinator on loopback: it registers as the shard of its
    JOB_COMPLETION_INDEX, with the token read from the Secret's file, and exits 0 when told."""
    (shard,) = job()["spec"]["template"]["spec"]["containers"]
    found = re.search(r"^ENTRYPOINT (.+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert found is not None
    entrypoint = json.loads(found[1])  # ["fluidity-exporter", "run"]: the Job must replace it
    assert shard["command"][0] == entrypoint[0] and shard["command"][1] == "shard"
    pool = ShardPool(2, "pod-token")
    url = await pool.start()
    # The mounted Secret's files, here: the token the coordinator expects, from the file the args name.
    for path, key in secret_files(job()["spec"]["template"]["spec"], shard).items():
        local_secret(path, tmp_path).write_text(
            "pod-token\n" if key == "shard-token" else f"value-of-{key}\n"
        )
    args = [
        f"--coordinator={url}" if a.startswith("--coordinator=") else reading_local_secrets(a, tmp_path)
        for a in shard["args"]
    ]
    binary = str(Path(sys.executable).parent / shard["command"][0])
    # A wrong token in the environment: the file the args name wins.
    env = {**os.environ, TOKEN_ENV: "wrong-token", "JOB_COMPLETION_INDEX": "1"}
    env.pop(API_KEY_ENV, None)
    proc = subprocess.Popen([binary, *shard["command"][1:], *args], env=env)
    try:
        await wait_for(
            lambda: 1 in pool.seen or proc.poll() is not None, timeout=30, what="shard 1 to report"
        )
        assert 1 in pool.seen, f"the shard exited with {proc.returncode} before reaching the coordinator"
    finally:
        await pool.close()
        code = await asyncio.to_thread(proc.wait, 10)
    assert code == 0


def test_the_overlay_patches_the_exporter_by_name_whatever_the_bases_order(tmp_path: Path) -> None:
    """The overlay over a copy of the base whose containers and volumes are in reverse order: the shard
    port is still the exporter's, and the token file the config names is still mounted in it."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, copy)
    deployment_file = copy / "base" / "deployment.yaml"
    deployment = yaml.safe_load(deployment_file.read_text())
    pod = deployment["spec"]["template"]["spec"]
    pod["containers"].reverse()
    pod["volumes"].reverse()
    deployment_file.write_text(yaml.safe_dump(deployment))
    resources = render(copy / SHARDED.relative_to(KUBERNETES))
    ((_, pod),) = pod_specs(resources)
    assert [c["name"] for c in pod["containers"]] == [EXPORTER_CONTAINER, "vllm"]
    exporter = container(pod, EXPORTER_CONTAINER)
    assert {"name": "shards", "containerPort": 9469} in exporter["ports"]
    assert "shards" not in str(container(pod, "vllm")["ports"])
    token_file = yaml.safe_load(exporter_config(resources))["jobs"]["shards"]["token"]["file"]
    assert secret_files(pod, exporter)[token_file] == "shard-token"
    for resource in resources:
        validate(resource)
