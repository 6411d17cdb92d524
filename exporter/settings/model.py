"""The validated configuration: frozen dataclasses of plain values (the run-time objects built from them
live with their users: workloads in ``exporter.load.config_workloads``, deadline policies in
``exporter.evaluation``; a target's client settings are plain data too, ``Target.client``).

Everything here is built by ``exporter.settings.parse`` (or ``default_config``) only after a whole file has
been checked, so every value is already valid. Configs compare by value (``old == new`` tells a reload
whether a probe job changed); a ``Secret`` compares by value too but never prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from exporter.settings.arrival import ArrivalProcess
from exporter.settings.job_params import JobKind, JobLimits, JobParams
from exporter.settings.lengths import Fixed, LogNormal, PairedLengths
from exporter.settings.shards import PoolSettings
from exporter.settings.slo import Slo
from exporter.settings.target import Api, Secret, TargetSettings, Timeouts
from exporter.settings.traffic import TrafficConfig
from exporter.settings.workload import WorkloadOptions, tool_calls_problem

DEFAULT_LISTEN_ADDRESS = "0.0.0.0:9468"
DEFAULT_SLO = "default"
BUCKET_NAMES = ("ttft", "tbt", "tpot", "e2e", "normalized_latency", "fluidity")


class UnknownNameError(LookupError):
    """A target, module or SLO name that the config does not define; the message lists the valid ones."""


@dataclass(frozen=True)
class Buckets:
    """Histogram bucket overrides (upper bounds; None: the preset's buckets) on a named preset."""

    preset: str = "default"  # a name of config.buckets.BUCKET_PRESETS
    ttft: tuple[float, ...] | None = None
    tbt: tuple[float, ...] | None = None
    tpot: tuple[float, ...] | None = None
    e2e: tuple[float, ...] | None = None
    normalized_latency: tuple[float, ...] | None = None
    fluidity: tuple[float, ...] | None = None


@dataclass(frozen=True)
class GlobalConfig:
    """Settings of the exporter itself."""

    listen_address: str = DEFAULT_LISTEN_ADDRESS
    # Where the jobs API and /-/reload listen, apart from /metrics (a job can saturate the replica that
    # Prometheus scrapes); None: beside /metrics on listen_address, as before the split.
    jobs_listen_address: str | None = None
    windows_s: tuple[float, ...] = (300.0, 3600.0)
    max_results_per_window: int = 2000
    state_dir: str | None = None
    buckets: Buckets = field(default_factory=Buckets)
    # /probe generates load on demand: with a token it requires "Authorization: Bearer <token>";
    # without one it only probes simulated targets (our own simulator).
    probe_token: Secret | None = None


@dataclass(frozen=True)
class Tls:
    """TLS options for an https target."""

    verify: bool = True
    ca_file: str | None = None


@dataclass(frozen=True)
class EngineMetrics:
    """Where and how often to scrape the engine's own /metrics (or a gateway's: the same keys)."""

    url: str
    kind: str = "auto"
    interval_s: float = 15.0
    model: str | None = None
    bearer_token: Secret | None = None  # sent as "Authorization: Bearer ..." with every scrape

    def headers(self) -> dict[str, str]:
        """The scrape's extra request headers."""
        token = self.bearer_token
        return {} if token is None else {"Authorization": f"Bearer {token.reveal()}"}


@dataclass(frozen=True)
class Budget:
    """Limits on the probe traffic sent to one target (None: no limit), and back-off while it fails."""

    max_requests_per_hour: int | None = None
    max_tokens_per_hour: int | None = None
    backoff_after_failures: int = 3
    max_backoff_s: float = 600.0


@dataclass(frozen=True)
class Target:
    """An endpoint to probe. ``simulated``: it is our simulator, so prompts can be exact in tokens."""

    name: str
    url: str
    api: Api = "chat"
    model: str | None = None
    api_key: Secret | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    extra_body: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    timeouts: Timeouts = field(default_factory=Timeouts)
    tls: Tls = field(default_factory=Tls)
    secret_headers: tuple[str, ...] = ()  # the headers whose values are masked wherever shown
    engine_metrics: EngineMetrics | None = None
    # The gateway in front of the target (llm-d's endpoint picker), scraped apart from the engine.
    gateway_metrics: EngineMetrics | None = None
    modules: tuple[str, ...] = ()
    slo: str = DEFAULT_SLO
    budget: Budget = field(default_factory=Budget)
    simulated: bool = False
    # Fit our approximate prompts to the target's tokenizer (three one-token requests per start or
    # reload, as a one-shot run's --no-calibrate turns off); never for a simulated target's exact ones.
    calibrate_prompts: bool = True
    # Accelerators behind this endpoint (per replica: what one capacity search loads) and what one of
    # them costs an hour: capacity results are then priced in GPU-seconds (fluid tokens per GPU-second,
    # the cost of a million tokens served within the SLO).
    gpus: float | None = None
    gpu_hour_price: float | None = None
    # How the probe client talks to it: the fields above as ``ProbeClient`` takes them, derived from
    # them (so neither compared nor shown apart from them).
    client: TargetSettings = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        client = TargetSettings(
            base_url=self.url,
            api=self.api,
            model=self.model,
            api_key=self.api_key,
            headers=self.headers,
            secret_headers=self.secret_headers,
            extra_body=self.extra_body,
            timeouts=self.timeouts,
            verify_tls=self.tls.verify,
            ca_file=self.tls.ca_file,
        )
        object.__setattr__(self, "client", client)

    @property
    def calibrates_prompts(self) -> bool:
        """Whether its prompts are fitted to its tokenizer first (never the simulator's exact ones)."""
        return self.calibrate_prompts and not self.simulated


@dataclass(frozen=True)
class WorkloadSpec(WorkloadOptions):
    """A module's workload (``exporter.settings.workload``, read by ``read_workload``), or (prompt,
    output) pairs from a trace file."""

    trace: PairedLengths | None = None  # read from the trace file at load time

    @classmethod
    def of(cls, options: WorkloadOptions) -> WorkloadSpec:
        if isinstance(options, WorkloadSpec):
            return options
        return cls(**{f.name: getattr(options, f.name) for f in fields(WorkloadOptions)})

    def brings_lengths(self) -> bool:
        return self.preset is not None or self.trace is not None

    def describe(self) -> str:
        if self.trace is not None:
            return self.trace.describe()
        if self.preset is not None or self.prompt_tokens is None or self.output_tokens is None:
            return f"preset {self.preset}"
        return f"prompt {self.prompt_tokens.describe()}, output {self.output_tokens.describe()}"


@dataclass(frozen=True)
class ProbeSchedule:
    """Every ``interval_s`` seconds with up to ``jitter_s`` of jitter, or on a ``cron`` line."""

    interval_s: float | None = 30.0
    jitter_s: float = 0.0
    cron: str | None = None


@dataclass(frozen=True)
class Module:
    """What one probe run sends: a workload, how many requests, open loop (arrival) or closed loop."""

    name: str
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None
    requests_per_run: int = 2
    arrival: ArrivalProcess | None = None  # open loop; exactly one of arrival and concurrency is set
    concurrency: int | None = 1  # closed loop
    schedule: ProbeSchedule = field(default_factory=ProbeSchedule)

    def problem_with(self, target: Target) -> str | None:
        """Why ``target`` cannot be sent this module's requests (None when it can): the config check,
        ``/probe`` and the workload built at run time apply the same rule."""
        problem = tool_calls_problem(self.workload.tool_calls, target.api)
        if problem is None:
            return None
        return f'target "{target.name}" cannot probe module "{self.name}": {problem}; change one of them'


@dataclass(frozen=True)
class JobSchedule:
    """A job the daemon starts on a ``cron`` line; ``name`` becomes a label value and a job id."""

    name: str
    kind: JobKind
    cron: str
    params: JobParams
    params_dict: Mapping[str, Any] = field(compare=False, repr=False)  # ``params`` as JSON data


@dataclass(frozen=True)
class JobsConfig:
    """On-demand and scheduled jobs (capacity search, prefill profiling) and the ceilings they obey."""

    # The jobs API (POST /api/v1/jobs/...) generates heavy load: without a token it is disabled.
    api_token: Secret | None = None
    limits: JobLimits = field(default_factory=JobLimits)
    history: int = 200  # finished jobs kept in state_dir/jobs
    schedules: tuple[JobSchedule, ...] = ()
    shards: ShardsConfig | None = None  # capacity trials over the pods of an Indexed Job


DEFAULT_SHARDS_LISTEN = "0.0.0.0:9469"
# Pods are slower to start and further apart than local processes.
DEFAULT_SHARD_POOL = PoolSettings(start_delay_s=2.0, ready_timeout_s=300.0, heartbeat_timeout_s=10.0)


@dataclass(frozen=True)
class ShardsConfig:
    """Capacity trials sharded over ``count`` pods of an Indexed Job (``deploy/kubernetes/shards/``):
    the daemon coordinates them on ``listen`` while a search runs; they present ``token``, a credential
    of their own that opens the shard port only (else ``jobs.api_token``, which opens the jobs API too)."""

    count: int
    listen: str = DEFAULT_SHARDS_LISTEN
    pool: PoolSettings = DEFAULT_SHARD_POOL
    target_urls: tuple[tuple[str, str], ...] = ()  # target -> URL from the pods (default: the target's)
    token: Secret | None = None

    def credential(self, api_token: Secret | None) -> Secret | None:
        """What the shards present: their own token, else the jobs API's."""
        return self.token if self.token is not None else api_token

    def url_for(self, target: str) -> str | None:
        return dict(self.target_urls).get(target)


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Config:
    """A whole, valid configuration. ``slos`` always holds ``"default"``; ``source`` is not compared
    (``jobs`` comes after it so that the positional form ``Config(global_, targets, modules, slos,
    source)`` keeps working)."""

    global_: GlobalConfig
    targets: tuple[Target, ...]
    modules: Mapping[str, Module]
    slos: Mapping[str, Slo]
    source: str = field(default="<config>", compare=False)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    # The secrets' files it read (``{file: PATH}``): what a config watch re-reads besides the config.
    secret_files: tuple[str, ...] = field(default=(), compare=False)
    traffic: TrafficConfig | None = None  # the observer of real traffic (exporter.traffic); None: off

    def __post_init__(self) -> None:
        object.__setattr__(self, "modules", _frozen(self.modules))
        object.__setattr__(self, "slos", _frozen({DEFAULT_SLO: Slo(), **self.slos}))

    def target(self, name: str) -> Target:
        for target in self.targets:
            if target.name == name:
                return target
        raise UnknownNameError(_unknown("target", name, [t.name for t in self.targets]))

    def module(self, name: str) -> Module:
        if name not in self.modules:
            raise UnknownNameError(_unknown("module", name, list(self.modules)))
        return self.modules[name]

    def slo_for(self, target: Target | str) -> Slo:
        """The SLO a target is evaluated under."""
        chosen = self.target(target) if isinstance(target, str) else target
        return self.slos[chosen.slo]

    def probes(self) -> tuple[tuple[Target, Module], ...]:
        """Every (target, module) pair to probe on a schedule, in config order."""
        return tuple((t, self.modules[m]) for t in self.targets for m in t.modules)


def _unknown(kind: str, name: str, valid: list[str]) -> str:
    return f'unknown {kind} "{name}"; valid: {", ".join(valid) or "(none)"}'


def default_config(sim_url: str, *, listen_address: str = DEFAULT_LISTEN_ADDRESS) -> Config:
    """The embedded default: probe the built-in simulator at ``sim_url`` with one small module."""
    module = Module(
        name="default",
        workload=WorkloadSpec(prompt_tokens=LogNormal(512, 0.5), output_tokens=Fixed(128)),
        requests_per_run=2,
        concurrency=1,
        schedule=ProbeSchedule(interval_s=15.0, jitter_s=3.0),
    )
    url = sim_url.rstrip("/")
    engine = EngineMetrics(url=f"{url}/metrics", kind="vllm", interval_s=15.0)
    target = Target(name="sim", url=url, modules=("default",), simulated=True, engine_metrics=engine)
    return Config(
        GlobalConfig(listen_address=listen_address), (target,), {"default": module}, {}, "<default>"
    )
