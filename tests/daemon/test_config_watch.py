"""``ConfigWatch``: one reload per change of the config file's content, seen through a ConfigMap volume's
symlink swap, and of a secret's file the config names; none for a rewrite with the same content or
while the file stays unreadable."""

from __future__ import annotations

from pathlib import Path

from exporter.daemon.config_watch import ConfigWatch, content_digest
from tests.support.configmap import mount, update


class Reloads:
    """The daemon's ``reload`` as the watch sees it: counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


async def test_a_configmap_update_reloads_once(tmp_path: Path) -> None:
    mount(tmp_path, {"config.yaml": "a: 1\n"})
    config = tmp_path / "config.yaml"
    reloads = Reloads()
    watch = ConfigWatch(config, reloads, interval_s=1.0)
    assert not await watch.check()
    update(tmp_path, {"config.yaml": "a: 1\n"})  # a new folder, the same content
    assert not await watch.check()
    update(tmp_path, {"config.yaml": "a: 2\n"})
    assert await watch.check()
    assert not await watch.check()
    assert reloads.count == 1


async def test_an_unreadable_file_is_one_change_not_one_per_poll(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("a: 1\n")
    reloads = Reloads()
    watch = ConfigWatch(config, reloads, interval_s=1.0)
    config.unlink()
    assert content_digest(config) is None
    assert await watch.check()  # the reload reports the missing file
    assert not await watch.check()
    config.write_text("a: 1\n")
    assert await watch.check()
    assert reloads.count == 2


async def test_a_rotated_secret_file_reloads_once(tmp_path: Path) -> None:
    """A Secret volume updates as a ConfigMap's does; the config file itself stays as it is."""
    config = tmp_path / "config.yaml"
    config.write_text("a: 1\n")
    secrets = tmp_path / "secrets"
    mount(secrets, {"token": "old\n"})
    named = [str(secrets / "token")]
    reloads = Reloads()
    watch = ConfigWatch(config, reloads, interval_s=1.0, files=lambda: named)
    update(secrets, {"token": "old\n"})
    assert not await watch.check()
    update(secrets, {"token": "new\n"})
    assert await watch.check()
    assert not await watch.check()
    assert reloads.count == 1


async def test_a_file_the_config_names_anew_is_a_baseline_not_a_change(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("a: 1\n")
    (tmp_path / "key").write_text("k\n")
    named: list[str] = []
    reloads = Reloads()
    watch = ConfigWatch(config, reloads, interval_s=1.0, files=lambda: named)
    named.append(str(tmp_path / "key"))  # as after a reload that read a new {file:}
    assert not await watch.check()
    (tmp_path / "key").write_text("k2\n")
    assert await watch.check()
    named.clear()  # no longer named: its changes are none of the watch's business
    (tmp_path / "key").write_text("k3\n")
    assert not await watch.check()
    assert reloads.count == 1
