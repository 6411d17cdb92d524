"""The workloads, requests and arrivals a trace's rows make (the files are read by
``exporter.settings.trace_files``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from exporter.load.workloads import Workload
from exporter.settings.arrival import TraceReplay
from exporter.settings.lengths import PairedLengths
from exporter.settings.trace_files import TIME_FIELDS, TraceRequest
from exporter.streams.request import FollowUp, RequestSpec


def trace_workload(records: Sequence[TraceRequest], base: Workload) -> Workload:
    """``base`` (its builder, api and filters) drawing (prompt, output) pairs jointly from the trace."""
    lengths = PairedLengths(
        tuple(r.prompt_tokens for r in records), tuple(r.output_tokens for r in records), source="trace"
    )
    return replace(base, lengths=lengths)


def trace_specs(
    records: Sequence[TraceRequest],
    workload: Workload,
    *,
    salt: int = 0,
    sessions: bool = False,
    think_times: Sequence[float] = (),
) -> list[RequestSpec]:
    """One request per trace row, in order (for timestamp replay). Rows with text send that text
    (its token count is the loader's estimate: run with ``prompt_tokens_exact=False``); rows without
    get a unique prompt of their length from the workload's builder. Filters are not applied here.
    With ``sessions`` a row's later turns become its follow-ups, ``think_times`` giving their pauses
    (in order over all follow-ups; missing ones are 0)."""
    specs = [
        _trace_spec(r, workload, salt + i, f"{workload.name}-{salt:010x}-{i}") for i, r in enumerate(records)
    ]
    if not sessions:
        return specs
    thinks = iter(think_times)
    return [
        replace(spec, followups=tuple(FollowUp(t, out, n, next(thinks, 0.0)) for t, n, out in r.followups))
        for spec, r in zip(specs, records, strict=True)
    ]


def trace_turns(records: Sequence[TraceRequest]) -> int:
    """Follow-up turns over all conversations of a trace."""
    return sum(len(r.followups) for r in records)


def _trace_spec(record: TraceRequest, workload: Workload, key: int, request_id: str) -> RequestSpec:
    if record.prompt is None:
        return workload.spec(record.prompt_tokens, record.output_tokens, key, request_id)
    messages = (("user", record.prompt),) if workload.api != "completions" else None
    return RequestSpec(
        record.prompt,
        record.output_tokens,
        record.prompt_tokens,
        messages,
        request_id,
        extra_body=workload.extra_body,
        tool_calls=workload.tool_calls,
    )


def trace_arrivals(records: Sequence[TraceRequest], *, time_scale: float = 1.0) -> TraceReplay:
    """The trace's timestamps as an arrival process (sorted order is required, not imposed)."""
    missing = [i for i, r in enumerate(records) if r.timestamp is None]
    if missing:
        raise ValueError(
            f"trace replay: request {missing[0]} has no timestamp ({len(missing)} without); every request"
            f" needs one: {TIME_FIELDS}"
        )
    return TraceReplay(tuple(float(r.timestamp or 0.0) for r in records), time_scale)
