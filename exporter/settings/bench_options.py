"""The options of the ``bench`` command, read once from its flags: the target, the workload, the load,
what the report evaluates, the client processes and where and how the report is written."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.evaluation_flags import EvaluationFlags, read_evaluation_flags
from exporter.settings.load_flags import LoadFlags, read_load_flags
from exporter.settings.oneshot import FlagReading, RawFlags, checked_workers
from exporter.settings.target_flags import TargetFlags, read_target_flags
from exporter.settings.workload_flags import WorkloadFlags, read_workload_flags


@dataclass(frozen=True)
class BenchOptions:
    """Everything ``bench`` was told: the groups of flags, the client processes (``workers``), and the
    output: its directory (None: a new ``bench-results/<time>``), whether an earlier result may be
    replaced, plots (None: not said), JSON on stdout and the progress line (``quiet``: none)."""

    target: TargetFlags
    workload: WorkloadFlags
    load: LoadFlags
    evaluation: EvaluationFlags
    workers: int = 1
    output: str | None = None
    force: bool = False
    plots: bool | None = None
    json: bool = False
    quiet: bool = False


def read_bench_options(raw: RawFlags) -> BenchOptions:
    """``bench``'s flags, every bad one reported together, before a simulator starts or any request is
    sent."""
    reading = FlagReading()
    evaluation = reading(lambda: read_evaluation_flags(raw))
    target = reading(lambda: read_target_flags(raw))
    workload = reading(lambda: read_workload_flags(raw, target.settings.api if target else None))
    workers = reading(lambda: checked_workers(raw.get("workers")))
    load = reading(lambda: read_load_flags(raw))
    reading.done()
    assert evaluation is not None and target is not None and workload is not None
    assert workers is not None and load is not None
    return BenchOptions(
        target, workload, load, evaluation, workers,
        output=raw.get("output"), force=bool(raw.get("force")), plots=raw.get("plots"),
        json=bool(raw.get("json")), quiet=bool(raw.get("quiet")),
    )  # fmt: skip
