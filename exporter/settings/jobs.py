"""The ``jobs`` section: the jobs API token, the ceilings every job obeys, and jobs run on a schedule.

A scheduled job's ``params`` are read by ``exporter.settings.job_parse``, the reader of HTTP bodies too, with
the limits of this same section, so a schedule is refused at load time for exactly what the API would
refuse it for; its target must be a configured one, and its module one of that target's modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from exporter.settings import bounds, job_parse
from exporter.settings.addresses import check_listen_address, check_target_url
from exporter.settings.cpus import available_cpus
from exporter.settings.job_params import JOB_KINDS, CapacityParams, JobKind, JobLimits, JobParams
from exporter.settings.model import (
    DEFAULT_SHARD_POOL,
    DEFAULT_SHARDS_LISTEN,
    JobSchedule,
    JobsConfig,
    ShardsConfig,
    Target,
)
from exporter.settings.reader import Context, Section, check_name, show
from exporter.settings.target import read_secret
from exporter.settings.values import check_cron

JOBS_KEYS = ("api_token", "limits", "history", "schedules", "workers", "shards")
LIMIT_KEYS = (
    "max_rate", "max_concurrency", "max_duration", "max_tokens", "max_trials", "max_requests_per_trial",
    "max_prompt_tokens",
)  # fmt: skip
SCHEDULE_KEYS = ("name", "kind", "cron", "params")
SHARDS_KEYS = (
    "count", "listen", "target_urls", "start_delay", "max_start_lateness", "ready_timeout", "heartbeat_timeout",
    "token",
)  # fmt: skip


def check_workers(value: Any) -> int:
    """``jobs.workers``: a number of client processes >= 1, or ``auto`` (the CPUs the container may use)."""
    if value == "auto":
        return available_cpus()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"must be an integer >= 1 or auto (the CPUs this container may use), got {show(value)}"
        )
    return value


class JobsReader:
    """Reads the ``jobs`` section against the targets the file defines."""

    def __init__(self, ctx: Context, targets: Sequence[Target]) -> None:
        self.ctx = ctx
        self.targets = {target.name: target for target in targets}

    def jobs(self, sec: Section) -> JobsConfig:
        api_token = read_secret(self.ctx, sec, "api_token", "the jobs API bearer token")
        limits = sec.section("limits", LIMIT_KEYS)
        parsed_limits = self.limits(limits) if limits is not None else JobLimits()
        parsed_limits = replace(parsed_limits, max_workers=sec.read("workers", 1, check_workers))
        shards = sec.section("shards", SHARDS_KEYS)
        if shards is not None and not (sec.has("api_token") or shards.has("token")):
            sec.fail(
                "shards", "needs jobs.shards.token (or jobs.api_token): the shards present it to the daemon"
            )
        return JobsConfig(
            api_token=api_token,
            limits=parsed_limits,
            history=sec.integer("history", JobsConfig.history, 1, bounds.MAX_JOB_HISTORY),
            schedules=self.schedules(sec, parsed_limits),
            shards=self.shards(shards) if shards is not None else None,
        )

    def shards(self, sec: Section) -> ShardsConfig | None:
        count = sec.integer("count", 1, minimum=1) if sec.required("count") else 1
        default = DEFAULT_SHARD_POOL
        pool = replace(
            default,
            start_delay_s=sec.duration("start_delay", default.start_delay_s),
            max_start_lateness_s=sec.duration("max_start_lateness", default.max_start_lateness_s),
            ready_timeout_s=sec.duration("ready_timeout", default.ready_timeout_s),
            heartbeat_timeout_s=sec.duration("heartbeat_timeout", default.heartbeat_timeout_s),
        )
        listen = sec.read("listen", DEFAULT_SHARDS_LISTEN, check_listen_address)
        token = read_secret(self.ctx, sec, "token", "the shards' bearer token")
        return ShardsConfig(count, listen, pool, self.target_urls(sec), token)

    def target_urls(self, sec: Section) -> tuple[tuple[str, str], ...]:
        """Target name -> its URL as the shard pods reach it (a sidecar's loopback is not theirs)."""
        raw = sec.section("target_urls", tuple(self.targets))
        if raw is None:
            return ()
        urls = ((name, raw.read(name, "", check_target_url, resolve=False)) for name in self.targets)
        return tuple((name, url) for name, url in urls if url)

    def limits(self, sec: Section) -> JobLimits:
        default = JobLimits()
        return JobLimits(
            max_rate=sec.number("max_rate", default.max_rate, 0.0, bounds.MAX_JOB_RATE, low_open=True),
            max_concurrency=sec.integer(
                "max_concurrency", default.max_concurrency, 1, bounds.MAX_JOB_CONCURRENCY
            ),
            max_duration_s=sec.duration(
                "max_duration", default.max_duration_s, maximum=bounds.MAX_JOB_DURATION_S
            ),
            max_tokens=sec.integer("max_tokens", default.max_tokens, 1, bounds.MAX_JOB_TOKENS),
            max_trials=sec.integer("max_trials", default.max_trials, 1, bounds.MAX_JOB_TRIALS),
            max_requests_per_trial=sec.integer(
                "max_requests_per_trial",
                default.max_requests_per_trial,
                job_parse.MIN_REQUESTS_PER_TRIAL,
                bounds.MAX_JOB_REQUESTS_PER_TRIAL,
            ),
            max_prompt_tokens=sec.integer(
                "max_prompt_tokens", default.max_prompt_tokens, 1, bounds.MAX_PROMPT_TOKENS
            ),
        )

    def schedules(self, sec: Section, limits: JobLimits) -> tuple[JobSchedule, ...]:
        seen: dict[str, str] = {}  # name -> path of the schedule that has it
        built = []
        for path, raw in sec.items("schedules"):
            item = Section.open(raw, path, self.ctx.problems, SCHEDULE_KEYS)
            schedule = self.schedule(item, limits, seen) if item is not None else None
            if schedule is not None:
                built.append(schedule)
        return tuple(built)

    def schedule(self, sec: Section, limits: JobLimits, seen: dict[str, str]) -> JobSchedule | None:
        name = sec.read("name", "", check_name, resolve=False) if sec.required("name") else ""
        if name in seen:
            sec.fail("name", f'duplicate schedule name "{name}" (also {seen[name]})')
        elif name:
            seen[name] = sec.path
        kind = sec.choice("kind", "", JOB_KINDS) if sec.required("kind") else ""
        cron = sec.read("cron", "", check_cron, resolve=False) if sec.required("cron") else ""
        if not (sec.required("params") and kind):
            return None
        job_kind, path = cast(JobKind, kind), sec.at("params")
        params = job_parse.read_params(job_kind, sec.get("params"), path, self.ctx.problems, limits)
        if params is None:
            return None
        self.check_references(path, params)
        return JobSchedule(name, job_kind, cron, params, job_parse.params_to_dict(params))

    def check_references(self, path: str, params: JobParams) -> None:
        """The target must be configured, and a capacity search's module one of the target's."""
        if not params.target:
            return  # already a problem
        target = self.targets.get(params.target)
        if target is None:
            valid = ", ".join(self.targets) or "(none)"
            self.ctx.problems.add(f"{path}.target", f"unknown target {show(params.target)}; valid: {valid}")
            return
        module = params.module if isinstance(params, CapacityParams) else None
        if module is not None and module not in target.modules:
            self.ctx.problems.add(
                f"{path}.module",
                f'module {show(module)} is not one of target "{target.name}"\'s modules; '
                f"valid: {', '.join(target.modules) or '(none)'}",
            )
