"""A bench run's report: the summary of its load, written to its output directory (and plots, when asked).

``bench_report`` computes the summary (``exporter.report.summary``) and writes the files
(``exporter.report.files``, ``exporter.report.plots``); the command prints what it returns.
Output directories are fresh per run (``timestamped``), and an earlier result is replaced only when
asked (``check_output_path``, checked before any load is sent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exporter.evaluation import EvaluationSpec, measure
from exporter.load.runner import LoadRun
from exporter.report.files import OUTPUT_FILES, write_outputs
from exporter.report.plots import PLOT_FILES
from exporter.report.summary import summarize

MAX_SAME_SECOND = 100  # runs that may share one second's folder name (``timestamped``)


@dataclass(frozen=True)
class BenchReport:
    """The summary (``summary.json``), the files written, and why the plots were not (None: they were
    written, or not asked for)."""

    summary: dict[str, Any]
    written: list[Path]
    no_plots: str | None = None


def bench_report(
    load: LoadRun, spec: EvaluationSpec, directory: Path, target: dict[str, Any], plots: bool
) -> BenchReport:
    """Compute the summary (``target``: what the target said about itself) and write the files, in
    place of any an earlier run left there (``--force``: its plots stayed beside the new data)."""
    measured = measure(load.results, spec)
    checks = [dataclasses.asdict(check) for check in load.checks]
    duration = max(load.finished_at - load.started_at, 1e-9)
    summary = summarize(load.results, measured, spec, duration, checks)
    summary["target"] = target
    remove_earlier_report(directory)
    wall_offset = time.time() - time.perf_counter()  # the results' stamps are perf_counter seconds
    written = write_outputs(directory, load.results, measured, summary, spec, wall_offset)
    if not plots:
        return BenchReport(summary, written)
    from exporter.report.plots import write_plots  # matplotlib only when asked for

    try:
        written += write_plots(directory, measured, spec.deadlines.decode_tiers)
    except RuntimeError as exc:  # the plots extra is not installed
        return BenchReport(summary, written, str(exc))
    return BenchReport(summary, written)


def remove_earlier_report(directory: Path) -> None:
    """The files a report writes, where an earlier run (``--force``) wrote them; nothing else in the
    folder is touched."""
    for name in (*OUTPUT_FILES, *PLOT_FILES):
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()


def timestamped(folder: str) -> Path:
    """``folder/20261123T184000Z``, created for this run before its load (``-2``, ``-3``, ... after the
    time when a run of the same second has it): a fresh place for each run's files, so none overwrites
    another (two runs in one second would write into one folder otherwise). ``release`` removes it
    again while it is empty, for a run that stops before its load."""
    stamp = Path(folder) / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1, MAX_SAME_SECOND + 1):
        candidate = stamp if attempt == 1 else stamp.with_name(f"{stamp.name}-{attempt}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(
                f"cannot create {candidate}: {exc.strerror or exc}; choose an --output"
            ) from None
        return candidate
    raise OutputError(f"{MAX_SAME_SECOND} runs this second already write under {folder}; choose an --output")


def release(directory: Path | None) -> None:
    """Remove a run's own folder (``timestamped``; None: the run was given one) while nothing is in
    it, and the folder above it while that is empty too: a run that stopped before writing leaves no
    empty ``capacity-results/`` behind."""
    if directory is not None:
        with contextlib.suppress(OSError):
            directory.rmdir()
            directory.parent.rmdir()


class OutputError(Exception):
    """This run could not write its result where ``--output`` says (the message says why)."""


class OutputExistsError(OutputError, FileExistsError):
    """An earlier result is where this run would write (the message says how to keep or replace it)."""


def check_output_path(path: Path, force: bool, *, new_folders: bool = True) -> None:
    """An earlier result at ``path`` is kept unless ``force`` (``--force``) says to replace it, and a
    place no result could be written is refused (both checked before any load is sent, so a search is
    never run only to be refused, or lost, at the end). ``new_folders``: the folders above ``path`` may
    be made (a report's folder); without it (``profile``'s one file) a missing folder is refused, as a
    mistyped ``/nonexistent/dir/x.json`` once made its folders from the root down."""
    if path.is_dir():  # before "exists": --force cannot replace a folder by a file
        what = "--output names the file to write" if not new_folders else "choose another --output"
        raise OutputError(f"cannot write {path}: it is a folder; {what}")
    if path.exists() and not force:
        raise OutputExistsError(f"{path} exists (an earlier result); choose another --output, or add --force")
    ancestor = path.parent
    while not ancestor.exists():  # the folders to create: the nearest that exists must take them
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"cannot write {path}: {ancestor} is not a folder; choose another --output")
    if not new_folders and ancestor != path.parent:
        raise OutputError(
            f"cannot write {path}: the folder {path.parent} does not exist; create it, or choose another "
            "--output"
        )
    try:  # a file made and dropped there: permissions, a read-only mount, a place like /proc
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as exc:
        raise OutputError(
            f"cannot write {path}: {ancestor} takes no new files ({exc.strerror or exc}); "
            "choose another --output"
        ) from None
