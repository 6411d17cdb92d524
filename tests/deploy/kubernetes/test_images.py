"""Every image a manifest runs is set by ``components/common``'s ``images:``, in every kustomization, so
that an overlay's ``images:`` (your registry) rewrites it: no manifest with a container lies outside a
kustomization, where a placeholder image would stay as written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.deploy.kubernetes.manifests import (
    KUBERNETES,
    KUSTOMIZATIONS,
    Resource,
    common_images,
    render,
    rendered,
)

FOLDERS = pytest.mark.parametrize("folder", list(KUSTOMIZATIONS.values()), ids=list(KUSTOMIZATIONS))
# Patches a user's own kustomization applies (docs/deployment.md), not resources of ours.
PATCHES = {KUBERNETES / "examples" / "sidecar-patch.yaml"}


def images(resources: list[Resource] | tuple[Resource, ...]) -> list[str]:
    return [
        box["image"]
        for r in resources
        if r["kind"] in {"Deployment", "Job"}
        for box in r["spec"]["template"]["spec"].get("containers", [])
    ]


def listed_files(folder: Path) -> set[Path]:
    """The files ``folder``'s kustomization names as resources or patches, and theirs (and its
    components'), recursively."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    found = {(folder / p["path"]).resolve() for p in kustomization.get("patches", []) if "path" in p}
    for entry in kustomization.get("components", []):
        found |= listed_files((folder / entry).resolve())
    for entry in kustomization.get("resources", []):
        path = (folder / entry).resolve()
        found |= listed_files(path) if path.is_dir() else {path}
    return found


@FOLDERS
def test_every_image_is_set_by_the_shared_images(folder: Path) -> None:
    tags = common_images()
    for image in images(rendered(folder)):
        name, _, tag = image.rpartition(":")
        assert tags.get(name) == tag, f"{folder.name}: {image} is not set by components/common's images"


def test_every_manifest_with_a_container_is_in_a_kustomization() -> None:
    listed = set().union(*(listed_files(folder) for folder in KUSTOMIZATIONS.values()))
    for path in KUBERNETES.rglob("*.yaml"):
        if path in PATCHES or path.name == "kustomization.yaml":
            continue
        documents = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        if any("containers" in str(d) for d in documents):
            assert path.resolve() in listed, f"{path.relative_to(KUBERNETES)} is in no kustomization"


def test_an_overlay_rewrites_the_shards_image(tmp_path: Path) -> None:
    """docs/deployment.md: your registry's image, in your overlay of the shards folder."""
    shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    overlay = {
        "resources": ["../kubernetes/shards"],
        "images": [{"name": "fluidity-exporter", "newName": "registry.example.com/fluidity-exporter"}],
    }
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    tag = common_images()["fluidity-exporter"]
    assert images(render(tmp_path / "mine")) == [f"registry.example.com/fluidity-exporter:{tag}"]
