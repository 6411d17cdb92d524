"""The probe client's process keeps to one thread of its own: numpy's BLAS starts none beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

COUNT_THREADS = (
    "import os, exporter.cli, numpy; numpy.ones((4, 4)) @ numpy.ones((4, 4)); "
    "print(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
)


def _run(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", COUNT_THREADS], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return done.stdout.split()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in Linux's /proc")
def test_importing_the_package_starts_no_blas_thread() -> None:
    # Without the cap, OpenBLAS on a 2-core machine starts one worker thread at numpy's import.
    threads, cap = _run({"PATH": "/usr/bin:/bin"})
    assert (threads, cap) == ("1", "1")


def test_a_blas_thread_count_the_user_set_is_kept() -> None:
    _, cap = _run({"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "2"})
    assert cap == "2"
