"""Fixtures of the probe's tests: ``both_reads`` runs a test with the stamped sockets read in C and in
Python (``socket_reads.NATIVE_READS``), the two ways an install reads them (with and without a compiler)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from weakref import WeakKeyDictionary

import pytest

from exporter.probe import socket_reads


@pytest.fixture(params=["native", "python"])
def both_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``native``: ``_reads.c`` (built wherever a compiler was at install; required on Linux, where CI
    runs, so a build that silently fell back fails here); ``python``: ``SocketReads`` alone."""
    native = request.param == "native"
    if native and socket_reads._native is None:
        if sys.platform == "linux":
            pytest.fail("exporter.probe._reads was not built: reinstall with a C compiler (pip install -e .)")
        pytest.skip("the C reads are built for Linux only")
    monkeypatch.setattr(socket_reads, "NATIVE_READS", native)
    monkeypatch.setattr(socket_reads, "_READS", WeakKeyDictionary())  # no loop's reads made the other way
    yield request.param
