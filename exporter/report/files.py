"""Writes an evaluation's output directory: requests.jsonl, summary.json and one CSV per metric.

Everything written here was computed by ``exporter.report.summary``; this module only formats and
writes. No secret is ever part of a ``ProbeResult``, so nothing here needs redacting.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from exporter.evaluation import EvaluationSpec, Measured
from exporter.probe.result import ProbeResult
from exporter.report.summary import request_record
from exporter.stats.fluidity import deadline_miss_curve

# From 5 ms to 500 ms: the range where inter-token deadlines of interactive serving live.
MISS_CURVE_DEADLINES_S = tuple(float(d) for d in np.geomspace(0.005, 0.5, 41))


def write_outputs(
    directory: Path,
    results: Sequence[ProbeResult],
    measured: Measured,
    summary: dict[str, Any],
    spec: EvaluationSpec,
) -> list[Path]:
    """Write every file of the report into ``directory`` (created if needed); returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [
        _write_jsonl(directory / "requests.jsonl", (request_record(r, spec) for r in results)),
        _write_json(directory / "summary.json", summary),
    ]
    written += _write_metric_csvs(directory, measured)
    written.append(write_miss_curve(directory / "deadline_miss_rate.csv", measured))
    return written


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")
    return path


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, allow_nan=False) + "\n")
    return path


def _write_metric_csvs(directory: Path, measured: Measured) -> list[Path]:
    latency = measured.latency
    per_request = {
        "ttft": latency.ttft,
        "tpot": latency.tpot,
        "e2e": latency.e2e,
        "normalized_latency": latency.normalized_latency,
        "output_tokens_per_s": latency.output_tokens_per_s,
        "longest_gap": latency.max_tbt,
    }
    per_request |= {f"fluidity_{tier}": result.fluidity for tier, result in measured.tiers.items()}
    paths = [_write_column(directory / f"{name}.csv", name, values) for name, values in per_request.items()]
    paths.append(_write_tbt(directory / "tbt.csv", measured))
    return paths


def _write_column(path: Path, name: str, values: np.ndarray) -> Path:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["request", name])
        writer.writerows((index, _cell(value)) for index, value in enumerate(values.tolist()))
    return path


def _write_tbt(path: Path, measured: Measured) -> Path:
    batch = measured.batch
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["request", "token", "tbt"])
        for request in range(len(batch)):
            gaps = batch.request(request)[1:].tolist()
            writer.writerows((request, token, gap) for token, gap in enumerate(gaps, start=1))
    return path


def write_miss_curve(path: Path, measured: Measured) -> Path:
    """Token-weighted decode deadline-miss rate against the decode deadline (the paper's Figure 5d)."""
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["decode_deadline_s", "miss_rate"])
        if measured.batch.token_count:
            curve = deadline_miss_curve(measured.batch, MISS_CURVE_DEADLINES_S)
            rates = (_cell(rate) for rate in curve.miss_rate.tolist())
            writer.writerows(zip(curve.decode_deadlines.tolist(), rates, strict=True))
    return path


def _cell(value: float) -> str | float:
    return "" if math.isnan(value) else value  # NaN: an empty cell
