"""The daemon's clients per target (``TargetPool``) across reloads."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from exporter.daemon.target_pool import TargetPool
from exporter.settings import load_config

CONFIG = """
targets:
  - name: t
    url: https://127.0.0.1:1
    model: m{tls}
"""


def self_signed(folder: Path) -> Path:
    """A self-signed certificate (a CA bundle of one) made by openssl."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key)]
    subprocess.run(
        ["openssl", "req", "-x509", *new_key, "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert


async def test_a_client_that_cannot_open_leaves_the_old_one_in_place(tmp_path: Path) -> None:
    """The CA file was read with the config and is gone when the reload applies it: the reload fails
    (the daemon keeps its previous config), and the target keeps probing with its previous client,
    which used to be closed before the new one had opened."""
    cert = self_signed(tmp_path)
    before = load_config(CONFIG.format(tls=""))
    after = load_config(CONFIG.format(tls=f"\n    tls: {{ca_file: {cert}}}"))
    pool = TargetPool()
    await pool.sync(before)
    try:
        client = pool.states["t"].client
        cert.unlink()
        with pytest.raises(FileNotFoundError):
            await pool.sync(after)
        await asyncio.sleep(0.1)  # a close scheduled for the old client would have run by now
        assert pool.states["t"].client is client
        assert pool.states["t"].config == before.target("t")
        assert client.pool is not None  # still open
    finally:
        await pool.close()
