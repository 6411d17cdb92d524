"""How many CPUs this process may really use: the container's cgroup quota, not ``os.cpu_count()``.

A container limited to 2 CPUs on a 64-core node still sees 64 in ``os.cpu_count()``; 8 worker processes
there would share 2 CPUs of quota, be throttled every period, and stamp their timings late. The limit
lives in the cgroup: ``cpu.max`` (v2: ``"<quota> <period>"`` or ``"max <period>"``) or
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (v1: quota ``-1`` for none). The CPUs usable are the
smaller of the quota rounded up and the CPUs this process may be scheduled on (``sched_getaffinity``,
which also reflects a cpuset). The parsing is pure; ``available_cpus`` reads the files.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where cgroup v1 mounts the cpu controller, depending on the distribution.
V1_FOLDERS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def quota_from_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` line (``"150000 100000"`` -> 1.5); None: no limit."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = float(parts[1]) if len(parts) > 1 else 100_000.0  # the kernel's default period
    return _ratio(float(parts[0]), period)


def quota_from_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; None: no limit."""
    quota = float(quota_text.strip())
    return None if quota < 0 else _ratio(quota, float(period_text.strip()))


def _ratio(quota: float, period: float) -> float | None:
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The quota in CPUs from the cgroup files under ``root`` (v2 first, then v1); None: no limit or
    no readable file."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        return quota_from_cpu_max(v2)
    for folder in V1_FOLDERS:
        quota, period = _read(root / folder / "cpu.cfs_quota_us"), _read(root / folder / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return quota_from_cfs(quota, period)
    return None


def usable_cpus(quota: float | None, schedulable: int) -> int:
    """The CPUs worth one busy process each: the quota rounded up, at most the schedulable ones, >= 1."""
    limit = schedulable if quota is None else min(schedulable, math.ceil(quota - 1e-9))
    return max(limit, 1)


def available_cpus(root: Path = CGROUP_ROOT, schedulable: int | None = None) -> int:
    """``usable_cpus`` of this process: the cgroup quota under ``root`` and its CPU affinity."""
    if schedulable is None:
        schedulable = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        )
    try:
        quota = cgroup_cpu_quota(root)
    except ValueError:  # a file we cannot read as numbers: trust the affinity alone
        quota = None
    return usable_cpus(quota, schedulable)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except OSError:
        return None
