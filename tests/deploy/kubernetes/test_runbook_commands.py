"""The runbook's kubectl commands name what the manifests render: for the base (the exporter a sidecar of
the vllm Deployment) and the standalone overlay alike, the Deployment, its pods' labels and the exporter's
container."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.deploy.files import RUNBOOK
from tests.deploy.kubernetes.manifests import (
    BASE,
    EXPORTER_CONTAINER,
    STANDALONE,
    container,
    of_kind,
    rendered,
)

FOLDERS = pytest.mark.parametrize("folder", [BASE, STANDALONE], ids=["base", "standalone"])


def kubectl_commands() -> list[list[str]]:
    """Every kubectl command line of the runbook's bash blocks, as words, up to a pipe or comment."""
    blocks = re.findall(r"```bash\n(.*?)```", RUNBOOK.read_text(), flags=re.DOTALL)
    lines = (line.split("|")[0].split("#")[0].strip() for block in blocks for line in block.splitlines())
    return [shlex.split(line) for line in lines if line.startswith("kubectl ")]


def exporter_deployments(folder: Path) -> list[tuple[str, dict[str, str]]]:
    """(name, pod labels) of every Deployment of ``folder`` that runs the exporter."""
    out = []
    for deployment in of_kind(rendered(folder), "Deployment"):
        pod = deployment["spec"]["template"]
        container(pod["spec"], EXPORTER_CONTAINER)  # raises when it has none
        out.append((deployment["metadata"]["name"], pod["metadata"]["labels"]))
    return out


@FOLDERS
def test_the_runbook_lists_and_reads_the_logs_of_the_exporter_s_pods(folder: Path) -> None:
    commands = kubectl_commands()
    for name, labels in exporter_deployments(folder):
        selectors = {words[words.index("-l") + 1] for words in commands if words[1:3] == ["get", "pods"]}
        assert any(dict([s.split("=", 1)]).items() <= labels.items() for s in selectors), (name, selectors)
        logs = [words for words in commands if words[1] == "logs" and f"deploy/{name}" in words]
        assert logs, f"no kubectl logs deploy/{name}"
        for words in logs:
            assert words[words.index("-c") + 1] == EXPORTER_CONTAINER, words


def test_every_deployment_and_label_the_runbook_names_is_rendered() -> None:
    layouts = [d for folder in (BASE, STANDALONE) for d in exporter_deployments(folder)]
    for words in kubectl_commands():
        for word in words:
            if word.startswith("deploy/"):
                assert word.removeprefix("deploy/") in {name for name, _ in layouts}, words
        if "-l" in words:
            key, _, value = words[words.index("-l") + 1].partition("=")
            assert any(labels.get(key) == value for _, labels in layouts), words
