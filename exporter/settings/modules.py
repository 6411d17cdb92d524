"""The ``modules`` and ``slos`` sections: what a probe run sends and when, and how its results are judged.

A module's workload, arrival and SLO are read by the settings' own readers (``read_workload``,
``read_arrival``, ``read_slo``), the same the flags and the jobs API use; the rest is the daemon's own.

A module's workload is checked against its length filters at load time (by
``exporter.load.config_workloads``, which draws from it), so a filter that rejects every draw is a config
problem rather than a failing job.
"""

from __future__ import annotations

from exporter.settings import bounds
from exporter.settings.arrival import read_arrival
from exporter.settings.lengths import PairedLengths
from exporter.settings.model import Module, ProbeSchedule, WorkloadSpec
from exporter.settings.presets import PRESET_SESSIONS
from exporter.settings.reader import Context, Section
from exporter.settings.slo import Slo, read_slo
from exporter.settings.trace_files import TRACE_FORMATS, load_trace
from exporter.settings.values import check_cron
from exporter.settings.workload import WorkloadOptions, read_workload

MODULE_KEYS = (
    "workload", "max_prompt_tokens", "max_output_tokens", "requests_per_run", "arrival", "concurrency",
    "schedule",
)  # fmt: skip


class ModuleReader:
    """Reads one module or one SLO at a time."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def module(self, name: str, sec: Section) -> Module:
        schedule = sec.section("schedule", ("interval", "jitter", "cron"))
        arrival = read_arrival(sec)
        module = Module(
            name=name,
            workload=self.workload(sec),
            max_prompt_tokens=sec.opt_integer("max_prompt_tokens", None, 1, bounds.MAX_PROMPT_TOKENS),
            max_output_tokens=sec.opt_integer("max_output_tokens", None, 1, bounds.MAX_OUTPUT_TOKENS),
            requests_per_run=sec.integer("requests_per_run", 2, 1, bounds.MAX_REQUESTS_PER_RUN),
            arrival=arrival,
            concurrency=None
            if arrival is not None
            else sec.opt_integer("concurrency", 1, 1, bounds.MAX_CONCURRENCY) or 1,
            schedule=self.schedule(schedule) if schedule is not None else ProbeSchedule(),
        )
        return module

    def workload(self, sec: Section) -> WorkloadSpec:
        """``workload`` (``exporter.settings.workload.read_workload``, as the flags read theirs), with a
        trace file read here."""
        return WorkloadSpec.of(read_workload(sec, PRESET_SESSIONS, self.trace_workload))

    def trace_workload(self, sec: Section) -> WorkloadOptions:
        """``{trace: PATH, format: sharegpt|azure|mooncake|jsonl}``: (prompt, output) pairs of a real trace,
        read now (relative to the config file) so a bad file fails at start-up, with its line."""
        if sec.has("prompt_tokens") or sec.has("output_tokens"):
            self.ctx.problems.add(sec.path, "give either trace (with format) or prompt_tokens/output_tokens")
            return WorkloadSpec()
        if not (sec.required("trace") and sec.required("format")):
            return WorkloadSpec()
        fmt = sec.choice("format", "jsonl", tuple(TRACE_FORMATS))
        path = self.ctx.path(str(sec.get("trace")))
        try:
            records = load_trace(path, fmt)
            pairs = PairedLengths(
                tuple(r.prompt_tokens for r in records),
                tuple(r.output_tokens for r in records),
                source=str(path),
            )
        except (OSError, ValueError) as exc:
            sec.fail("trace", str(exc))
            return WorkloadSpec()
        return WorkloadSpec(trace=pairs)

    def schedule(self, sec: Section) -> ProbeSchedule:
        cron = sec.read("cron", None, check_cron, resolve=False)
        if sec.has("cron") and sec.has("interval"):
            self.ctx.problems.add(sec.path, "give either interval or cron, not both")
        interval = None if sec.has("cron") else sec.duration("interval", 30.0, maximum=bounds.MAX_INTERVAL_S)
        jitter = sec.duration("jitter", 0.0, positive=False, maximum=bounds.MAX_INTERVAL_S)
        if interval is not None and jitter >= interval:
            sec.fail("jitter", f"must be less than the interval ({interval:g} s), got {jitter:g} s")
        return ProbeSchedule(interval_s=interval, jitter_s=jitter, cron=cron)

    def slo(self, name: str, sec: Section) -> Slo:
        """``slos.<name>``: the name is the mapping's key, not part of the SLO."""
        return read_slo(sec, self.ctx.path, profiled=True)
