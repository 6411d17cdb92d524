"""The daemon's side of the jobs API for the web tests: a ``JobService`` with a fixed token, limits and
targets, shared by the API tests and the OpenAPI fuzzing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.jobs.manager import JobManager
from exporter.settings.job_params import JobLimits
from exporter.streams.request import Secret

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Service:
    """The daemon's side of the API, as ``JobService`` asks for it."""

    job_manager: JobManager
    token: Secret | None = field(default_factory=lambda: Secret(TOKEN))
    limits: JobLimits = field(default_factory=lambda: JobLimits(max_rate=10.0))
    targets: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {"a": ("chat", "code"), "b": ("chat",)}
    )

    def jobs_token(self) -> Secret | None:
        return self.token

    def job_limits(self) -> JobLimits:
        return self.limits

    def job_targets(self) -> Mapping[str, tuple[str, ...]]:
        return self.targets
