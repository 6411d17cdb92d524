"""aiohttp routes of the daemon, in the Prometheus exporters' style.

* ``GET /metrics``: everything the daemon knows (probe values are cached from scheduled probes).
* ``GET /probe?target=&module=[&debug=true]``: run one probe now (blackbox_exporter style) and return
  only its metrics, in a fresh registry; bounded by the target's probe budget, one at a time per
  (target, module), and by the scrape timeout Prometheus sends (``X-Prometheus-Scrape-Timeout-Seconds``);
  authenticated by ``global.probe_token`` (without one, only simulated targets can be probed on demand). ``debug=true`` returns a readable log of
  this probe and the recent results of that (target, module), failures kept longer.
* ``/api/v1/jobs...``: capacity searches and prefill profiles on demand (``exporter.web.jobs_api``).
* ``GET /-/healthy``, ``GET /-/ready`` (ready once the config is loaded and the scheduler runs),
  ``POST /-/reload``, and ``GET /`` linking them.
"""

from __future__ import annotations

import asyncio
import hmac
import html

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from exporter import __version__
from exporter.app import Daemon, ProbeRefusedError, ProbeRun
from exporter.config import UnknownNameError
from exporter.exposition import render
from exporter.exposition.collector import probe_registry
from exporter.probe.result import ProbeResult, intervals
from exporter.web.jobs_api import add_job_routes

DAEMON = web.AppKey("daemon", Daemon)
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
DEFAULT_PROBE_TIMEOUT_S = 120.0
TIMEOUT_MARGIN_S = 0.5  # answer before Prometheus gives up on the scrape


def build_app(daemon: Daemon) -> web.Application:
    """The aiohttp application serving ``daemon``."""
    app = web.Application()
    app[DAEMON] = daemon
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/probe", probe)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    app.router.add_post("/-/reload", reload)
    add_job_routes(app, daemon)
    return app


async def index(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    probes = "".join(
        f'<li><a href="/probe?target={html.escape(t.name)}&amp;module={html.escape(m.name)}&amp;debug=true">'
        f"{html.escape(t.name)} / {html.escape(m.name)}</a></li>"
        for t, m in daemon.config.probes()
    )
    body = (
        f"<html><head><title>Fluidity Exporter</title></head><body><h1>Fluidity Exporter {__version__}</h1>"
        '<p><a href="/metrics">Metrics</a> | <a href="/-/healthy">Healthy</a> | <a href="/-/ready">Ready</a></p>'
        f"<h2>Probe now (debug view)</h2><ul>{probes}</ul></body></html>"
    )
    return web.Response(text=body, content_type="text/html")


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[DAEMON].metrics_text(), headers={"Content-Type": render.CONTENT_TYPE}
    )


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
    ok, message = await request.app[DAEMON].reload()
    return web.Response(status=200 if ok else 500, text=message + "\n")


def _authorize_probe(request: web.Request, daemon: Daemon, target: str) -> None:
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
    given = request.headers.get("Authorization", "")
    expected = f"Bearer {token.reveal()}"
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise web.HTTPUnauthorized(
            text="/probe needs Authorization: Bearer <global.probe_token>\n",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _probe_timeout(request: web.Request) -> float:
    raw = request.headers.get(SCRAPE_TIMEOUT_HEADER)
    try:
        return max(float(raw) - TIMEOUT_MARGIN_S, 0.5) if raw else DEFAULT_PROBE_TIMEOUT_S
    except ValueError:
        raise web.HTTPBadRequest(text=f"{SCRAPE_TIMEOUT_HEADER}: expected seconds, got {raw!r}\n") from None


async def probe(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    target, module = request.query.get("target", ""), request.query.get("module", "")
    try:
        daemon.config.target(target)
        daemon.config.module(module)
    except UnknownNameError as exc:
        raise web.HTTPBadRequest(text=f"{exc}\n") from None
    _authorize_probe(request, daemon, target)
    timeout = _probe_timeout(request)
    try:
        run = await asyncio.wait_for(daemon.probe_now(target, module), timeout)
    except ProbeRefusedError as exc:
        raise web.HTTPTooManyRequests(text=f"{exc}\n") from None
    except TimeoutError:
        raise web.HTTPGatewayTimeout(
            text=f"probe {target}/{module} took longer than {timeout:.1f} s\n"
        ) from None
    if request.query.get("debug", "").lower() == "true":
        return web.Response(text=_debug(daemon, target, module, run))
    slo = daemon.config.slo_for(target)
    registry = probe_registry(
        run.results,
        daemon.deadline_policy(target),
        target=target,
        module=module,
        goodput=slo.goodput,
        slos=slo.objectives,
        duration_s=run.duration_s,
        buckets=daemon.store.buckets,
    )
    return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _debug(daemon: Daemon, target: str, module: str, run: ProbeRun) -> str:
    lines = [f"probe {target}/{module}: {len(run.results)} requests in {run.duration_s:.3f} s", ""]
    lines += [_describe(i, r) for i, r in enumerate(run.results)]
    lines += ["", "recent results of scheduled probes (failures kept longer):"]
    lines += [f"  {item}" for item in daemon.store.recent(target, module)] or ["  none yet"]
    return "\n".join(lines) + "\n"


def _describe(index: int, result: ProbeResult) -> str:
    values = intervals(result)
    ttft = f"{values[0]:.3f}s" if values else "-"
    detail = f" ({result.error})" if result.error else ""
    return (
        f"  #{index}: {result.outcome.value}{detail}; tokens {result.output_tokens} ({result.token_source.value}); "
        f"ttft {ttft}; longest gap {max(values[1:], default=0.0):.3f}s; unreliable {result.unreliable}"
    )
