"""Where a run's files go: a fresh folder per run, an earlier result kept unless --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.evaluation import EvaluationSpec
from exporter.load.runner import LoadRun
from exporter.report.bench_report import OutputExistsError, bench_report, check_output_path, timestamped
from exporter.report.plots import PLOT_FILES
from tests.report.test_summary import RESULTS


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


def test_a_forced_run_leaves_no_plot_of_the_earlier_one(tmp_path: Path) -> None:
    """``--force`` without ``--plots`` left the earlier run's PNGs beside the new data they did not show."""
    load = LoadRun(
        list(RESULTS), [], "closed", None, 1, started_at=0.0, finished_at=10.0, stopped_by="requests"
    )
    first = bench_report(load, EvaluationSpec(), tmp_path, {}, plots=True)
    assert {p.name for p in first.written} >= set(PLOT_FILES)
    (tmp_path / "notes.txt").write_text("mine\n")  # not a report's file: kept
    second = bench_report(load, EvaluationSpec(), tmp_path, {}, plots=False)
    assert {p.name for p in tmp_path.iterdir()} == {p.name for p in second.written} | {"notes.txt"}
