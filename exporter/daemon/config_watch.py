"""Reloading the config when its file's content changes (``run --config.auto-reload-interval``).

Kubernetes updates a mounted ConfigMap in place by swapping a symlink (``..data``) to a new folder: the
file's own mtime may not change, and an editor may rewrite a file with its old content. So the watch
hashes the content every few seconds and reloads (the daemon's ``reload``: the old config stays unless
the new one parses completely) when the hash differs from the last one seen. A file that cannot be read
counts as one more content, so a missing file is reported once by the failed reload, not every poll.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

LOG = logging.getLogger(__name__)

Reload = Callable[[], Awaitable[object]]


def content_digest(path: Path) -> str | None:
    """SHA-256 of the file's bytes, read in chunks (constant memory); ``None`` when it cannot be read."""
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError:
        return None


class ConfigWatch:
    """Polls ``path`` every ``interval_s`` and calls ``reload`` once per change of its content."""

    def __init__(self, path: Path, reload: Reload, interval_s: float) -> None:
        self.path, self.reload, self.interval_s = path, reload, interval_s
        self.last = content_digest(path)  # what the daemon loaded at start-up

    async def check(self) -> bool:
        """Reload if the content changed since the last check; whether it did."""
        digest = await asyncio.to_thread(content_digest, self.path)
        if digest == self.last:
            return False
        self.last = digest
        LOG.info("%s changed: reloading", self.path)
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
