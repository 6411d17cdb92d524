"""Reloading the config when its file's content changes (``run --config.auto-reload-interval``).

Kubernetes updates a mounted ConfigMap in place by swapping a symlink (``..data``) to a new folder: the
file's own mtime may not change, and an editor may rewrite a file with its old content. So the watch
hashes the content every few seconds and reloads (the daemon's ``reload``: the old config stays unless
the new one parses completely) when the hash differs from the last one seen. A file that cannot be read
counts as one more content, so a missing file is reported once by the failed reload, not every poll.

The secrets' files the config names (``{file: PATH}``, a mounted Secret the kubelet updates the same way)
are watched too: a secret is read once, when the config is, so a rotated key or token would otherwise
wait for the next config change or SIGHUP. Which files those are comes from the config in force, asked
on every poll; a file it names for the first time (a reload just read it) is a baseline, not a change.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

LOG = logging.getLogger(__name__)

Reload = Callable[[], Awaitable[object]]
Files = Callable[[], Iterable[str]]  # the secrets' files of the config in force


def content_digest(path: Path) -> str | None:
    """SHA-256 of the file's bytes, read in chunks (constant memory); ``None`` when it cannot be read."""
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError:
        return None


class ConfigWatch:
    """Polls ``path`` and the files ``files()`` names every ``interval_s``, and calls ``reload`` once per
    change of their content."""

    def __init__(self, path: Path, reload: Reload, interval_s: float, files: Files = lambda: ()) -> None:
        self.path, self.reload, self.interval_s, self.files = path, reload, interval_s, files
        self.seen = digests(self.watched())  # what the daemon loaded at start-up

    def watched(self) -> list[Path]:
        return [self.path, *(Path(file) for file in self.files())]

    async def check(self) -> bool:
        """Reload if a watched content changed since the last check; whether it did."""
        now = await asyncio.to_thread(digests, self.watched())
        changed = [path for path, digest in now.items() if path in self.seen and self.seen[path] != digest]
        self.seen = now
        if not changed:
            return False
        LOG.info("%s changed: reloading", ", ".join(map(str, changed)))
        await self.reload()
        return True

    async def run(self) -> None:
        """Check forever (until cancelled); a bug in one check is logged and the watch goes on."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception:
                LOG.exception("config watch: the check of %s failed (a bug)", self.path)


def digests(paths: Iterable[Path]) -> dict[Path, str | None]:
    """Each file's ``content_digest``."""
    return {path: content_digest(path) for path in paths}
