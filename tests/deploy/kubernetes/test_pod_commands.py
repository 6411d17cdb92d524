"""What the pod and the image run, run here: the exporter container's flags with the base ConfigMap's
config (its vLLM replaced by the simulator on loopback), answered by the path of the liveness probe
and by the Dockerfile's HEALTHCHECK command, word for word."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from exporter.sim.process import SimProcess
from tests.deploy.kubernetes.manifests import (
    BASE,
    EXPORTER_CONTAINER,
    EXPORTER_PORT,
    SECRETS_DIR,
    STATE_DIR,
    Resource,
    container,
    exporter_config,
    final_stage,
    image_healthcheck_url,
    pod_specs,
    rendered,
    secret_files,
)
from tests.support.configmap import mount, update
from tests.support.net import free_port
from tests.support.wait import wait_until

START_TIMEOUT_S = 30.0


def status(url: str, token: str | None = None) -> int:
    """The HTTP status of a GET, with ``token`` as its bearer token if given (0 when nothing answered)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def local_config(resources: tuple[Resource, ...], pod: Resource, sim_url: str, tmp_path: Path) -> str:
    """The ConfigMap's config, run here: vLLM replaced by the simulator, the state folder and the Secret's
    files (placeholders) in ``tmp_path``."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for path in secret_files(pod, container(pod, EXPORTER_CONTAINER)):
        (secrets / Path(path).name).write_text("placeholder\n")
    text = exporter_config(resources).replace("http://127.0.0.1:8000", sim_url)
    return text.replace(STATE_DIR, str(tmp_path / "state")).replace(SECRETS_DIR, str(secrets))


def with_config_file(args: list[str], config: Path, auto_reload: str | None = None) -> list[str]:
    """The container's args with ``config`` for its config file, without its listen address, and with
    ``auto_reload`` for its reload interval (when given)."""
    replaced = {"--config.file": str(config), "--config.auto-reload-interval": auto_reload}
    out = []
    for arg in args:
        name, _, value = arg.partition("=")
        if name != "--web.listen-address":
            out.append(f"{name}={replaced.get(name) or value}" if value else arg)
    return out


def test_the_pods_command_reloads_a_changed_configmap_within_seconds(tmp_path: Path) -> None:
    """The container's flags on a ConfigMap volume laid out as the kubelet does: an update (a symlink
    swap) renaming the target is live without a restart, as the index page lists the targets."""
    resources = rendered(BASE)
    ((_, pod),) = pod_specs(resources)
    exporter = container(pod, EXPORTER_CONTAINER)
    assert any(a.startswith("--config.auto-reload-interval=") for a in exporter["args"])
    port = free_port()
    with SimProcess(["--preset", "tiny"]) as sim:
        text = local_config(resources, pod, sim.url, tmp_path)
        volume = tmp_path / "etc"
        mount(volume, {"config.yaml": text})
        args = with_config_file(exporter["args"], volume / "config.yaml", auto_reload="200ms")
        process = subprocess.Popen(
            [sys.executable, "-m", "exporter", "run", *args, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": "/usr/bin:/bin"},  # the container's: no secret in it
        )
        try:
            index = f"http://127.0.0.1:{port}/"
            wait_until(lambda: "vllm / chat-short" in page(index), timeout=START_TIMEOUT_S, what="start")
            update(volume, {"config.yaml": text.replace("  - name: vllm\n", "  - name: vllm-renamed\n")})
            wait_until(lambda: "vllm-renamed / chat-short" in page(index), timeout=10, what="the reload")
            assert process.poll() is None  # reloaded, not restarted
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "config reloaded from" in err


def test_the_pods_command_takes_a_rotated_secret_within_seconds(tmp_path: Path) -> None:
    """The Secret's volume laid out as the kubelet does: a rotated probe token (a symlink swap; the config
    file is left as it is) is the one /probe accepts within seconds, without a restart."""
    resources = rendered(BASE)
    ((_, pod),) = pod_specs(resources)
    files = secret_files(pod, container(pod, EXPORTER_CONTAINER))
    keys = {Path(path).name: f"old-{key}\n" for path, key in files.items()}
    volume = tmp_path / "secret-volume"
    mount(volume, keys)
    port = free_port()
    with SimProcess(["--preset", "tiny"]) as sim:
        text = local_config(resources, pod, sim.url, tmp_path).replace(str(tmp_path / "secrets"), str(volume))
        config = tmp_path / "config.yaml"
        config.write_text(text)
        args = with_config_file(container(pod, EXPORTER_CONTAINER)["args"], config, auto_reload="200ms")
        process = subprocess.Popen(
            [sys.executable, "-m", "exporter", "run", *args, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": "/usr/bin:/bin"},
        )
        try:
            probe = f"http://127.0.0.1:{port}/probe?target=vllm&module=chat-short"
            wait_until(lambda: status(probe, "old-probe-token") == 200, timeout=START_TIMEOUT_S, what="start")
            update(volume, {**keys, "probe-token": "new-probe-token\n"})
            wait_until(lambda: status(probe, "new-probe-token") == 200, timeout=10, what="the new token")
            assert status(probe, "old-probe-token") == 401
            assert process.poll() is None  # reloaded, not restarted
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "probe-token changed: reloading" in err and "new-probe-token" not in err


def page(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read(1 << 20).decode())
    except OSError:
        return ""


def test_the_probes_and_the_image_healthcheck_see_the_daemon_start_with_the_base_config(
    tmp_path: Path,
) -> None:
    resources = rendered(BASE)
    ((_, pod),) = pod_specs(resources)
    exporter = container(pod, EXPORTER_CONTAINER)
    port = free_port()
    healthcheck = json.loads(dict(final_stage())["HEALTHCHECK"].split("CMD", 1)[1])
    healthcheck[0] = sys.executable
    # The image's default URL, at this test's port (docker run -e FLUIDITY_HEALTHCHECK_URL=... does so).
    url = image_healthcheck_url().replace(f":{EXPORTER_PORT}/", f":{port}/")
    check_env = os.environ | {"FLUIDITY_HEALTHCHECK_URL": url}

    with SimProcess(["--sim-preset", "tiny"]) as sim:
        config = tmp_path / "config.yaml"
        config.write_text(local_config(resources, pod, sim.url, tmp_path))
        args = with_config_file(exporter["args"], config)
        process = subprocess.Popen(
            [sys.executable, "-m", "exporter", "run", *args, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": "/usr/bin:/bin"},  # the container's: no secret in it
        )
        try:
            # The sidecar has a liveness probe only (its readiness would gate vLLM's).
            liveness = f"http://127.0.0.1:{port}{exporter['livenessProbe']['httpGet']['path']}"
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and status(liveness) != 200:
                assert process.poll() is None, process.communicate()[1]
                time.sleep(0.2)
            assert status(liveness) == 200
            assert (
                subprocess.run(healthcheck, check=False, capture_output=True, env=check_env).returncode == 0
            )
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    # After it stops, the image's health check reports unhealthy.
    assert subprocess.run(healthcheck, check=False, capture_output=True, env=check_env).returncode == 1
