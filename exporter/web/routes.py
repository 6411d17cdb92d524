"""aiohttp routes of the daemon, in the Prometheus exporters' style.

* ``GET /metrics``: everything the daemon knows (probe families from the scheduled probes), the
  exporter's own health and the standard ``process_*`` and ``python_*`` collectors.
* ``GET /probe?target=&module=[&debug=true]``: run one probe now (blackbox_exporter style) and return
  only its metrics, in a fresh registry; bounded by the target's probe budget, one at a time per
  (target, module), and by the scrape timeout Prometheus sends (``X-Prometheus-Scrape-Timeout-Seconds``);
  authenticated by ``global.probe_token`` (without one, only simulated targets can be probed on demand).
  As in blackbox_exporter, a probe that fails, times out or may not run now is data, not an outage: the
  answer is 200 with ``fluidity_probe_success 0`` and the reason in ``fluidity_probe_failure_info``.
  ``debug=true`` returns a readable log of this probe, the target's state and last error, and the
  recent results of that (target, module), failures kept longer.
* ``/api/v1/jobs...``: capacity searches and prefill profiles on demand (``exporter.web.jobs_api``).
* ``GET /-/healthy``, ``GET /-/ready`` (ready once the config is loaded and the scheduler runs),
  ``POST /-/reload`` (only with ``--web.enable-lifecycle``, as in Prometheus: it re-reads files and
  changes what load is generated), and ``GET /`` linking them with each target's state and last error.

Both metric endpoints answer in the text format 0.0.4, gzip-compressed when the scraper accepts it;
``/metrics`` is rendered at most once a second (``exporter.web.metrics_cache``), however often scraped.
With ``global.jobs_listen_address`` the jobs API and ``/-/reload`` are served there alone
(``build_jobs_app``) and not beside ``/metrics``.
"""

from __future__ import annotations

import gzip
import html
import math
import time
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from aiohttp import web

from exporter import __version__
from exporter.evaluation import DeadlinePolicy, EvaluationSpec, measure
from exporter.exposition import render
from exporter.exposition.probe_registry import FinishedProbe, failed_probe_registry, probe_registry
from exporter.exposition.result_store import ResultStore
from exporter.exposition.views import RecentResult, iso
from exporter.settings import Config, UnknownNameError
from exporter.streams.result import ProbeCutError, ProbeRefusedError, ProbeResult, ProbeRun, intervals
from exporter.streams.saturation import ReadEvidence, why_unreliable
from exporter.web.jobs_api import JobService, add_job_routes
from exporter.web.metrics_cache import GZIP_LEVEL, MAX_AGE_S, MetricsCache


class Described(Protocol):
    """Anything that says its state in one line (a target's health)."""

    def describe(self) -> str: ...


class TargetView(Protocol):
    """A configured target as the index shows it."""

    @property
    def health(self) -> Described: ...


class Scheduler(Protocol):
    """The probe scheduler, as far as readiness goes."""

    @property
    def running(self) -> bool: ...


class DaemonService(Protocol):
    """What the routes need from the daemon (``exporter.app.Daemon`` is the one implementation), read at
    request time because a reload can change it."""

    @property
    def config(self) -> Config: ...

    @property
    def config_path(self) -> str | None:
        """The config file a reload re-reads (None: the embedded default, nothing to reload)."""
        ...

    @property
    def job_env(self) -> JobService:
        """The daemon's side of the jobs API."""
        ...

    @property
    def targets(self) -> Mapping[str, TargetView]: ...

    @property
    def jobs(self) -> Scheduler: ...

    @property
    def ready(self) -> bool: ...

    @property
    def store(self) -> ResultStore: ...

    def metrics_text(self) -> bytes: ...

    async def reload(self) -> tuple[bool, str]: ...

    async def probe_now(self, target_name: str, module_name: str, timeout_s: float) -> ProbeRun: ...

    def deadline_policy(self, target: str) -> DeadlinePolicy: ...


DAEMON: Final = web.AppKey[DaemonService]("daemon")
LIFECYCLE = web.AppKey("lifecycle", bool)
METRICS = web.AppKey("metrics", MetricsCache)
JOBS_HERE = web.AppKey("jobs_here", bool)  # False: the jobs API listens apart (global.jobs_listen_address)
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
DEFAULT_PROBE_TIMEOUT_S = 120.0
MAX_PROBE_TIMEOUT_S = 600.0  # a longer header is cut to this: no scrape waits longer for one probe
TIMEOUT_MARGIN_S = 0.5  # answer before Prometheus gives up on the scrape


def build_app(
    daemon: DaemonService,
    *,
    enable_lifecycle: bool = False,
    metrics_max_age_s: float = MAX_AGE_S,
    jobs: bool = True,
) -> web.Application:
    """The aiohttp application serving ``daemon``; ``enable_lifecycle`` allows ``POST /-/reload``;
    ``/metrics`` renders at most once per ``metrics_max_age_s`` (``exporter.web.metrics_cache``).
    ``jobs`` False leaves the jobs API and ``/-/reload`` to ``build_jobs_app`` on a port of their own."""
    app = _daemon_app(daemon, enable_lifecycle)
    app[METRICS] = MetricsCache(daemon.metrics_text, metrics_max_age_s)
    app[JOBS_HERE] = jobs
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/probe", probe)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    if jobs:
        _add_jobs_and_reload(app, daemon)
    return app


def build_jobs_app(daemon: DaemonService, *, enable_lifecycle: bool = False) -> web.Application:
    """The jobs API and ``POST /-/reload`` alone (``global.jobs_listen_address``): a job can saturate
    the replica, and a Service that Prometheus scrapes need not expose what sends load or reloads."""
    app = _daemon_app(daemon, enable_lifecycle)
    _add_jobs_and_reload(app, daemon)
    return app


def _daemon_app(daemon: DaemonService, enable_lifecycle: bool) -> web.Application:
    app = web.Application()
    app[DAEMON] = daemon
    app[LIFECYCLE] = enable_lifecycle
    return app


def _add_jobs_and_reload(app: web.Application, daemon: DaemonService) -> None:
    app.router.add_post("/-/reload", reload)
    add_job_routes(app, daemon.job_env)


# Said beside the links, which a browser follows without a token (they answer 401 or 403 then).
PROBE_ACCESS = (
    "Each sends load on demand: with global.probe_token set it needs that bearer token (curl -H "
    "'Authorization: Bearer ...'); without one, only simulated targets may be probed this way."
)


async def index(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    probes = "".join(
        f'<li><a href="/probe?target={html.escape(t.name)}&amp;module={html.escape(m.name)}&amp;debug=true">'
        f"{html.escape(t.name)} / {html.escape(m.name)}</a></li>"
        for t, m in daemon.config.probes()
    )
    states = "".join(
        f"<li>{html.escape(name)}: {html.escape(state.health.describe())}</li>"
        for name, state in daemon.targets.items()
    )
    jobs = (
        '<a href="/api/v1/openapi.json">Jobs API (OpenAPI)</a>'
        if request.app[JOBS_HERE]
        else "Jobs API: on its own port (global.jobs_listen_address)"
    )
    body = (
        f"<html><head><title>Fluidity Exporter</title></head><body><h1>Fluidity Exporter {__version__}</h1>"
        '<p><a href="/metrics">Metrics</a> | <a href="/-/healthy">Healthy</a> | <a href="/-/ready">Ready</a> | '
        f"{jobs}</p>"
        f"<h2>Targets</h2><ul>{states}</ul>"
        f"<h2>Probe now (debug view)</h2><p>{PROBE_ACCESS}</p><ul>{probes}</ul></body></html>"
    )
    return web.Response(text=body, content_type="text/html")


def _accepts_gzip(request: web.Request) -> bool:
    return "gzip" in request.headers.get("Accept-Encoding", "")


def _metrics_answer(body: bytes, *, gzipped: bool) -> web.Response:
    headers = {"Content-Type": render.CONTENT_TYPE}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


def exposition(request: web.Request, text: bytes) -> web.Response:
    """A metrics answer: the text format, gzip-compressed when the scraper accepts it (Prometheus does)."""
    gzipped = _accepts_gzip(request)
    body = gzip.compress(text, compresslevel=GZIP_LEVEL) if gzipped else text
    return _metrics_answer(body, gzipped=gzipped)


async def metrics(request: web.Request) -> web.Response:
    gzipped = _accepts_gzip(request)
    return _metrics_answer(request.app[METRICS].body(gzipped=gzipped), gzipped=gzipped)


async def healthy(_: web.Request) -> web.Response:
    return web.Response(text="Healthy.\n")


async def ready(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    if daemon.ready and daemon.jobs.running:
        return web.Response(text="Ready.\n")
    return web.Response(
        status=503, text="Not ready: the config is loading or the scheduler is not running.\n"
    )


async def reload(request: web.Request) -> web.Response:
    if not request.app[LIFECYCLE]:
        # A reload re-reads files and changes what load is sent: like Prometheus, only when asked for.
        raise web.HTTPForbidden(
            text="Lifecycle API is not enabled: start with --web.enable-lifecycle, or send SIGHUP\n"
        )
    daemon = request.app[DAEMON]
    ok, message = await daemon.reload()
    if daemon.config_path is None:  # nothing failed: there is no file (a conflict with how it runs)
        return web.Response(status=409, text=message + "\n")
    return web.Response(status=200 if ok else 500, text=message + "\n")


def _authorize_probe(request: web.Request, daemon: DaemonService, target: str) -> None:
    """``/probe`` sends load on demand: a configured token is required (constant-time compare); with no
    token configured only simulated targets may be probed this way."""
    token = daemon.config.global_.probe_token
    if token is None:
        if not daemon.config.target(target).simulated:
            raise web.HTTPForbidden(
                text=f"/probe would send load to {target} on demand: set global.probe_token "
                "({env: NAME} or {file: PATH}) and send it as a bearer token\n"
            )
        return
    if not token.matches_bearer(request.headers.get("Authorization")):
        raise web.HTTPUnauthorized(
            text="/probe needs Authorization: Bearer <global.probe_token>\n",
            headers={"WWW-Authenticate": "Bearer"},
        )


def probe_timeout(raw: str | None) -> float:
    """The on-demand probe's deadline from the scrape timeout header (absent: the default), less the
    margin and at most ``MAX_PROBE_TIMEOUT_S``; a ``ValueError`` for anything but a positive, finite
    number of seconds (``float`` reads ``nan`` and ``inf``: the first once gave a 500, the second no
    deadline at all)."""
    if not raw:
        return DEFAULT_PROBE_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{SCRAPE_TIMEOUT_HEADER}: expected a positive number of seconds, got {raw!r}")
    return min(max(seconds - TIMEOUT_MARGIN_S, 0.5), MAX_PROBE_TIMEOUT_S)


def _probe_timeout(request: web.Request) -> float:
    try:
        return probe_timeout(request.headers.get(SCRAPE_TIMEOUT_HEADER))
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"{exc}\n") from None


def _unfinished(exc: Exception, timeout: float) -> tuple[str, str]:
    """(reason, why) of an on-demand probe that did not finish: refused, cut by a shutdown, or past the
    scrape timeout."""
    if isinstance(exc, ProbeRefusedError):
        return exc.reason, str(exc)
    if isinstance(exc, ProbeCutError):
        return "shutdown", str(exc)
    return "scrape_timeout", f"the probe took longer than {timeout:.1f} s (the scrape timeout)"


def _debug_flag(request: web.Request) -> bool:
    """``debug=true`` or ``false`` (absent: false); anything else is refused, not read as false (read as
    false, ``debug=yes`` would give metrics where a person asked for the readable page)."""
    raw = request.query.get("debug", "false").lower()
    if raw not in ("true", "false"):
        raise web.HTTPBadRequest(text=f"debug: expected true or false, got {request.query['debug']!r}\n")
    return raw == "true"


async def probe(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    target, module = request.query.get("target", ""), request.query.get("module", "")
    missing = [name for name in ("target", "module") if not request.query.get(name)]
    if missing:  # said as missing, not as the unknown name ""
        given = {"target": [t.name for t in daemon.config.targets], "module": list(daemon.config.modules)}
        lines = [f"missing query parameter {name}; valid: {', '.join(given[name])}" for name in missing]
        raise web.HTTPBadRequest(text="\n".join(lines) + "\n")
    try:
        # A pair of names the config does not put together may still be one the target cannot send.
        configured = daemon.config.target(target)
        problem = daemon.config.module(module).problem_with(configured)
    except UnknownNameError as exc:
        raise web.HTTPBadRequest(text=f"{exc}\n") from None
    _authorize_probe(request, daemon, target)
    if problem is not None:
        raise web.HTTPBadRequest(text=f"{problem}\n")
    timeout = _probe_timeout(request)
    debug = _debug_flag(request)
    started = time.perf_counter()
    try:
        run = await daemon.probe_now(target, module, timeout)
    except (ProbeRefusedError, TimeoutError) as exc:
        # A probe that cannot run or finish is a failed probe (data), not a failed scrape (an outage).
        refused = isinstance(exc, ProbeRefusedError)
        reason, why = _unfinished(exc, timeout)
        if debug:
            return web.Response(text=_debug_failed(daemon, target, module, why))
        elapsed = None if refused else time.perf_counter() - started
        return exposition(
            request, render.render(failed_probe_registry(target, module, reason, elapsed).collect()).encode()
        )
    if debug:
        return web.Response(text=_debug(daemon, target, module, run))
    spec = EvaluationSpec.of(daemon.config.slo_for(target), deadlines=daemon.deadline_policy(target))
    probe = FinishedProbe(target, module, run.results, run.duration_s)
    registry = probe_registry(probe, spec, daemon.store.buckets)
    return exposition(request, render.render(registry.collect()).encode())


def _target_lines(daemon: DaemonService, target: str, module: str) -> list[str]:
    state = daemon.targets.get(target)
    lines = [f"target {target}: {state.health.describe() if state is not None else 'unknown'}", ""]
    lines += ["recent results of scheduled probes, newest first (failures kept longer):"]
    lines += [_describe_recent(item) for item in daemon.store.recent(target, module)] or ["  none yet"]
    return lines


def _debug(daemon: DaemonService, target: str, module: str, run: ProbeRun) -> str:
    lines = [f"probe {target}/{module}: {len(run.results)} requests in {run.duration_s:.3f} s", ""]
    figures = _fluidity_figures(run.results, daemon.deadline_policy(target))
    lines += [_describe(i, r, figures.get(id(r), "")) for i, r in enumerate(run.results)]
    lines += ["", *_target_lines(daemon, target, module)]
    return "\n".join(lines) + "\n"


def _debug_failed(daemon: DaemonService, target: str, module: str, why: str) -> str:
    lines = [f"probe {target}/{module} failed: {why}", "", *_target_lines(daemon, target, module)]
    return "\n".join(lines) + "\n"


def _fluidity_figures(results: Sequence[ProbeResult], policy: DeadlinePolicy) -> dict[int, str]:
    """``Dp`` and fluidity per decode tier of each completed request (by ``id``), as the metrics
    evaluate them (``measure`` under the target's deadline policy)."""
    measured = measure(results, EvaluationSpec(policy))
    figures = {}
    for position, result in enumerate(measured.results):
        tiers = ", ".join(f"{tier} {batch.fluidity[position]:.3f}" for tier, batch in measured.tiers.items())
        figures[id(result)] = f"Dp {measured.prefill_deadlines[position]:.3f}s; fluidity {tiers}; "
    return figures


def _describe(index: int, result: ProbeResult, fluidity: str = "") -> str:
    values = intervals(result)
    ttft = f"{values[0]:.3f}s" if values else "-"
    detail = f" ({result.error})" if result.error else ""
    # The saturation rule's evidence (probe/saturation.py), and what flagged it, so a flag can be told
    # from a slow target.
    reads = int(result.extra.get("token_reads", 0))
    why = why_unreliable(ReadEvidence.of(result, reads))
    evidence = (
        f"loop lag {result.loop_lag_s * 1e3:.1f} ms, {result.loop_lag_share:.0%} of samples late, "
        f"{result.multi_event_reads} multi-event reads of {reads}, {result.stamps} stamps"
        + (f": {why}" if why else "")
    )
    return (
        f"  #{index}: {result.outcome.value}{detail}; tokens {result.output_tokens} ({result.token_source.value}); "
        f"ttft {ttft}; longest gap {max(values[1:], default=0.0):.3f}s; {fluidity}unreliable {result.unreliable} "
        f"({evidence})"
    )


def _describe_recent(item: RecentResult) -> str:
    status = f" HTTP {item.http_status}" if item.http_status not in (None, 200) else ""
    error = f" ({item.error})" if item.error else ""
    ttft = f"{item.ttft_s:.3f}s" if item.ttft_s is not None else "-"
    e2e = f"{item.e2e_s:.3f}s" if item.e2e_s is not None else "-"
    flag = "; timings unreliable" if item.unreliable else ""
    return (
        f"  {iso(item.at)} {item.outcome.value}{status}{error}; tokens {item.output_tokens}; "
        f"ttft {ttft}; e2e {e2e}{flag}"
    )
