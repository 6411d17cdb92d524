"""Writes an evaluation's output directory: requests.jsonl, summary.json, requests.csv, tbt.csv and the
deadline-miss curve.

Every request has an ``id`` (its place in ``requests.jsonl``) and a wall-clock ``sent_at_utc``; the CSVs
are keyed by that id (``requests.csv``: one row per request with each metric, empty where a request did
not complete; ``tbt.csv``: one row per gap), so a spreadsheet joins them by key, never by position.
Everything written here was computed by ``exporter.report.summary``; this module only formats and
writes. No secret is ever part of a ``ProbeResult``, so nothing here needs redacting.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from exporter.evaluation import EvaluationSpec, Measured
from exporter.report.summary import request_record
from exporter.stats.fluidity import deadline_miss_curve
from exporter.streams.result import ProbeResult

# From 5 ms to 500 ms: the range where inter-token deadlines of interactive serving live.
MISS_CURVE_DEADLINES_S = tuple(float(d) for d in np.geomspace(0.005, 0.5, 41))
# Every file ``write_outputs`` writes (a forced run removes an earlier run's first: ``bench_report``).
OUTPUT_FILES = ("requests.jsonl", "summary.json", "requests.csv", "tbt.csv", "deadline_miss_rate.csv")


def write_outputs(
    directory: Path,
    results: Sequence[ProbeResult],
    measured: Measured,
    summary: dict[str, Any],
    spec: EvaluationSpec,
    wall_offset: float = 0.0,
) -> list[Path]:
    """Write every file of the report into ``directory`` (created if needed); returns the paths.
    ``wall_offset``: unix time minus the results' monotonic clock, which dates each request."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = _completed_ids(results, measured)
    records = (
        {"id": index, "sent_at_utc": _utc(r.sent_at, wall_offset), **request_record(r, spec)}
        for index, r in enumerate(results)
    )
    return [
        _write_jsonl(directory / "requests.jsonl", records),
        _write_json(directory / "summary.json", summary),
        _write_requests_csv(directory / "requests.csv", results, measured, ids, wall_offset),
        _write_tbt(directory / "tbt.csv", measured, ids),
        write_miss_curve(directory / "deadline_miss_rate.csv", measured),
    ]


def _completed_ids(results: Sequence[ProbeResult], measured: Measured) -> list[int]:
    """The request id of each measured (completed) request, in ``measured``'s order."""
    index = {id(result): position for position, result in enumerate(results)}
    return [index[id(result)] for result in measured.results]


def _utc(stamp: float | None, wall_offset: float) -> str | None:
    """A monotonic stamp as an ISO 8601 UTC instant (microseconds), None when not recorded."""
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp + wall_offset, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")
    return path


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, allow_nan=False) + "\n")
    return path


def _write_requests_csv(
    path: Path, results: Sequence[ProbeResult], measured: Measured, ids: list[int], wall_offset: float
) -> Path:
    """One row per request, keyed by its id: what happened, then each metric of a completed one."""
    latency = measured.latency
    metrics = {
        "ttft_s": latency.ttft,
        "tpot_s": latency.tpot,
        "e2e_s": latency.e2e,
        "normalized_latency_s": latency.normalized_latency,
        "output_tokens_per_s": latency.output_tokens_per_s,
        "longest_gap_s": latency.max_tbt,
    }
    metrics |= {f"fluidity_{tier}": result.fluidity for tier, result in measured.tiers.items()}
    rows: dict[int, list[str | float]] = {
        request: [_cell(float(values[position])) for values in metrics.values()]
        for position, request in enumerate(ids)
    }
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "sent_at_utc", "outcome", "prompt_tokens", "output_tokens", *metrics])
        for index, result in enumerate(results):
            prompt = result.prompt_tokens_reported or result.prompt_tokens_intended
            head = [index, _utc(result.sent_at, wall_offset) or "", result.outcome.value, prompt or ""]
            writer.writerow([*head, result.output_tokens, *rows.get(index, [""] * len(metrics))])
    return path


def _write_tbt(path: Path, measured: Measured, ids: list[int]) -> Path:
    batch = measured.batch
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "token", "tbt_s"])
        for position, request in enumerate(ids):
            gaps = batch.request(position)[1:].tolist()
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
