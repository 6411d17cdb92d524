"""The CPUs a container may use, from cgroup v2 and v1 fixture files and the affinity."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.settings.cpus import (
    available_cpus,
    cgroup_cpu_quota,
    quota_from_cfs,
    quota_from_cpu_max,
    usable_cpus,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max 100000\n", None),
        ("200000 100000\n", 2.0),
        ("150000 100000", 1.5),
        ("50000 100000", 0.5),
        ("100000", 1.0),  # period left out: the kernel's default 100 ms
        ("", None),
    ],
)
def test_cpu_max(text: str, expected: float | None) -> None:
    assert quota_from_cpu_max(text) == expected


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("-1\n", "100000\n", None), ("300000", "100000", 3.0), ("25000", "50000", 0.5), ("0", "100000", None)],
)
def test_cfs_quota(quota: str, period: str, expected: float | None) -> None:
    assert quota_from_cfs(quota, period) == expected


@pytest.mark.parametrize(
    ("quota", "schedulable", "expected"),
    [(None, 8, 8), (2.0, 64, 2), (1.5, 64, 2), (0.5, 64, 1), (16.0, 4, 4), (2.0000000001, 8, 2)],
)
def test_usable_cpus(quota: float | None, schedulable: int, expected: int) -> None:
    assert usable_cpus(quota, schedulable) == expected


def test_v2_is_read_first(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path) == 2.5
    assert available_cpus(tmp_path, schedulable=64) == 3


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_v1_files(tmp_path: Path, folder: str) -> None:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / folder / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(tmp_path, schedulable=16) == 2


def test_no_limit_falls_back_to_the_affinity(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path) is None
    assert available_cpus(tmp_path, schedulable=6) == 6
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cpus(tmp_path, schedulable=6) == 6


def test_an_unreadable_quota_falls_back_to_the_affinity(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("lots 100000\n")
    assert available_cpus(tmp_path, schedulable=3) == 3


def test_this_machine_has_at_least_one() -> None:
    assert available_cpus() >= 1
