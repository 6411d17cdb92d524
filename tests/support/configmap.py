"""A ConfigMap volume as the kubelet lays it out and updates it: each file a symlink through ``..data``,
a symlink to a timestamped folder, swapped atomically for a new folder on every update (so the file's
path and mtime seen through the symlink say nothing about a change; only its content does)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_VERSIONS = itertools.count()


def mount(volume: Path, files: dict[str, str]) -> None:
    """Lay out ``files`` (name -> text) in ``volume`` as a ConfigMap volume."""
    volume.mkdir(parents=True, exist_ok=True)
    update(volume, files)
    for name in files:
        (volume / name).symlink_to(Path("..data") / name)


def update(volume: Path, files: dict[str, str]) -> None:
    """Write a new version of the files and swap ``..data`` to it in one rename, as the kubelet does."""
    version = volume / f"..2026_12_02_{next(_VERSIONS):06d}"
    version.mkdir()
    for name, text in files.items():
        (version / name).write_text(text)
    link = volume / "..data_tmp"
    link.symlink_to(version.name)
    os.replace(link, volume / "..data")
