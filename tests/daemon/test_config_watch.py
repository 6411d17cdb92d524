"""``ConfigWatch``: one reload per change of the config file's content, seen through a ConfigMap volume's
symlink swap; none for a rewrite with the same content or while the file stays unreadable."""

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
