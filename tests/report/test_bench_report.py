"""Where a run's files go: a fresh folder per run, an earlier result kept unless --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.report.bench_report import OutputExistsError, refuse_overwrite, timestamped


def test_a_run_gets_a_timestamped_folder() -> None:
    path = timestamped("bench-results")
    assert path.parent == Path("bench-results") and len(path.name) == len("20261123T184000Z")


def test_an_earlier_result_is_kept_unless_forced(tmp_path: Path) -> None:
    refuse_overwrite(tmp_path / "absent.json", force=False)
    earlier = tmp_path / "capacity.json"
    earlier.write_text("{}")
    with pytest.raises(OutputExistsError, match="choose another --output, or add --force"):
        refuse_overwrite(earlier, force=False)
    refuse_overwrite(earlier, force=True)
