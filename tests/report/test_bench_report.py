"""Where a run's files go: a fresh folder per run, an earlier result kept unless --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.report.bench_report import OutputExistsError, check_output_path, timestamped


def test_a_run_gets_a_timestamped_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # it makes the folder: not in the checkout
    path = timestamped("bench-results")
    assert path.parent == Path("bench-results") and len(path.name) == len("20261123T184000Z")
    assert path.is_dir()


def test_an_earlier_result_is_kept_unless_forced(tmp_path: Path) -> None:
    check_output_path(tmp_path / "absent.json", force=False)
    earlier = tmp_path / "capacity.json"
    earlier.write_text("{}")
    with pytest.raises(OutputExistsError, match="choose another --output, or add --force"):
        check_output_path(earlier, force=False)
    check_output_path(earlier, force=True)
