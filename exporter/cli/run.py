"""``fluidity-exporter run``: the long-running exporter (a sidecar next to vLLM or any OpenAI server).

Without ``--config.file`` it starts the built-in simulated engine in a child process on a loopback port
and probes it with a small default module, so a newcomer sees live metrics with no GPU. Flags follow the
Prometheus exporters: ``--config.file``, ``--web.listen-address`` (default ``0.0.0.0:9468``: every
interface, so that Prometheus can scrape a sidecar), ``--web.jobs-listen-address`` (the jobs API and
``/-/reload`` on a port of their own, not beside ``/metrics``), ``--web.enable-lifecycle`` (``POST /-/reload``),
``--config.auto-reload-interval`` (reload when the file's content changes, as Prometheus's flag),
``--log.level``. SIGHUP reloads the config; SIGTERM and Ctrl-C shut down gracefully. Start-up and
shutdown problems (a port in use, a bad config) are one line each, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from exporter.app import SHUTDOWN_GRACE_S, Daemon, web_app
from exporter.cli.command import Command
from exporter.cli.flags import DeprecatedAlias
from exporter.daemon.config_watch import ConfigWatch
from exporter.load.config_workloads import CONFIG_CHECKS
from exporter.probe import loop as event_loop
from exporter.settings import DEFAULT_LISTEN_ADDRESS, Config, SettingsError, default_config, load_config_file
from exporter.settings.addresses import ListenError, check_listen_address, host_port
from exporter.settings.reader import parse_duration
from exporter.sim.engine_presets import PRESETS as SIM_PRESETS
from exporter.sim.process import DEFAULT_PRESET as DEFAULT_SIM_PRESET
from exporter.sim.process import SimProcess
from exporter.web import listener
from exporter.web.routes import build_jobs_app

LOG = logging.getLogger("exporter")
LOG_LEVELS = ("debug", "info", "warn", "error")
LISTEN_BACKLOG = 128  # as aiohttp's sites listen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``run``."""
    parser.add_argument(
        "--config.file", dest="config_file", help="YAML config (default: probe the simulator)"
    )
    parser.add_argument(
        "--web.listen-address",
        dest="listen_address",
        type=_listen_address_flag,
        help=f"HOST:PORT (default: global.listen_address, else {DEFAULT_LISTEN_ADDRESS}: every interface)",
    )
    parser.add_argument(
        "--web.jobs-listen-address",
        dest="jobs_listen_address",
        type=_listen_address_flag,
        help="HOST:PORT serving the jobs API and POST /-/reload apart from /metrics "
        "(default: global.jobs_listen_address, else beside /metrics)",
    )
    parser.add_argument(
        "--web.enable-lifecycle",
        dest="enable_lifecycle",
        action="store_true",
        help="allow POST /-/reload (as in Prometheus; SIGHUP always reloads)",
    )
    parser.add_argument(
        "--config.auto-reload-interval",
        dest="auto_reload_s",
        type=_duration_flag,
        default=0.0,
        help="reload when the config file's content changes, checked this often, e.g. 10s (a mounted "
        "ConfigMap; default 0: off)",
    )
    parser.add_argument(
        "--log.level", dest="log_level", default="info", choices=LOG_LEVELS, help="log level (default info)"
    )
    parser.add_argument(  # the choices: a usage error (2) before anything starts, not the child's (1)
        "--sim-preset",
        default=DEFAULT_SIM_PRESET,
        choices=sorted(SIM_PRESETS),
        help="embedded default's model (a simulator preset)",
    )
    parser.add_argument(
        "--sim.preset",
        dest="sim_preset",
        action=DeprecatedAlias,
        use="--sim-preset",
        choices=sorted(SIM_PRESETS),
    )


def _listen_address_flag(text: str) -> str:
    """``--web.listen-address``, checked when the flags are read: a malformed one is a usage error."""
    try:
        return check_listen_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration_flag(text: str) -> float:
    """``--config.auto-reload-interval``: a duration (``10s``), checked when the flags are read."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def split_address(address: str) -> tuple[str, int]:
    """``"0.0.0.0:9468" -> ("0.0.0.0", 9468)``; ``"[::1]:9468"`` works too. Checked as the config's
    ``global.listen_address`` is (a port above 65535 would wrap around when bound)."""
    try:
        check_listen_address(address)
    except ValueError as exc:
        raise ValueError(f"--web.listen-address: {exc}") from None
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


@contextlib.contextmanager
def embedded_or_file(args: argparse.Namespace, loaded: Config | None) -> Iterator[Config]:
    """The config file's config (``loaded``), or the embedded default around a simulator child process."""
    if loaded is not None:
        yield loaded
        return
    with SimProcess(["--sim-preset", args.sim_preset]) as sim:
        LOG.info("no --config.file: probing the built-in simulator (%s) at %s", args.sim_preset, sim.url)
        yield default_config(sim.url)


def listen(address: str) -> list[socket.socket]:
    """Sockets listening on ``address``, or a ``ListenError`` that says where and why not."""
    host, port = split_address(address)
    try:
        return listening_sockets(host, port)
    except OSError as exc:
        raise ListenError.of(address, exc) from None


@dataclass(frozen=True)
class Serving:
    """How the daemon is served: its web app on ``sockets`` (bound to ``address``), the jobs API and
    ``/-/reload`` on ``jobs_sockets`` apart from it when given, the lifecycle endpoints when
    ``enable_lifecycle``, and a reload whenever the config file's content changes, checked every
    ``auto_reload_s`` (when > 0)."""

    address: str
    sockets: list[socket.socket]
    jobs_sockets: list[socket.socket] | None = None
    enable_lifecycle: bool = False
    auto_reload_s: float = 0.0


async def serve(daemon: Daemon, serving: Serving) -> None:
    """Run the daemon and its web app as ``serving`` says until SIGTERM/SIGINT; SIGHUP reloads."""
    address, sockets, jobs_sockets = serving.address, serving.sockets, serving.jobs_sockets
    enable_lifecycle = serving.enable_lifecycle
    host, port = split_address(address)
    if port == 0 and sockets:  # the system chose it: say the one bound (the first address's)
        port = sockets[0].getsockname()[1]
    daemon.listen_address = address
    # A handler still running at shutdown (an on-demand /probe) gets the scheduled probes' grace, not
    # aiohttp's 60 s: a pod's 30 s of grace once ended in SIGKILL behind one (78 s to stop).
    app = web_app(daemon, enable_lifecycle=enable_lifecycle, jobs=jobs_sockets is None)
    runner = web.AppRunner(
        app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S, **listener.runner_options()
    )
    jobs_runner = None
    if jobs_sockets is not None:
        jobs_app = build_jobs_app(daemon, enable_lifecycle=enable_lifecycle)
        jobs_runner = web.AppRunner(
            jobs_app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S, **listener.runner_options()
        )
    watching: asyncio.Task[None] | None = None
    try:
        await runner.setup()  # starts the daemon (web_app's cleanup context)
        for sock in sockets:
            await listener.CappedSockSite(runner, sock).start()  # bounded connections (web.listener)
        if jobs_runner is not None and jobs_sockets is not None:
            await jobs_runner.setup()
            for sock in jobs_sockets:
                await listener.CappedSockSite(jobs_runner, sock).start()
        # Everything allocated so far lives as long as the process: moving it out of the collector's
        # sight keeps full collections (tens of ms, in the middle of a probe's stream or a scrape) short.
        gc.freeze()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(daemon.reload()))
        watching = watch_config(daemon, serving.auto_reload_s)
        print(f"fluidity-exporter: {startup_line(host, port)}{jobs_line(jobs_sockets)}", flush=True)
        await stop.wait()
    finally:
        if watching is not None:
            watching.cancel()  # no reload may start while the daemon stops
        if jobs_runner is not None:
            await jobs_runner.cleanup()  # before the daemon stops: no job call reaches a stopped daemon
        await runner.cleanup()  # stops the daemon after the last request
        print("fluidity-exporter: stopped", flush=True)


def watch_config(daemon: Daemon, interval_s: float) -> asyncio.Task[None] | None:
    """The task reloading ``daemon`` when the content of its config file or of a secret's file it names
    changes, if ``interval_s`` > 0."""
    if interval_s <= 0 or daemon.config_path is None:
        return None
    watch = ConfigWatch(
        Path(daemon.config_path), daemon.reload, interval_s, lambda: daemon.config.secret_files
    )
    return asyncio.get_running_loop().create_task(watch.run())


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound and listening on every address ``host`` resolves to, as asyncio's ``create_server``
    binds them (an IPv6 socket only for IPv6): bound before the daemon starts, served after."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, sockaddr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(sockaddr)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def startup_line(host: str, port: int) -> str:
    """Where the exporter listens, as bound, and the URL to open from this machine."""
    if host in ("0.0.0.0", "::", ""):
        return f"listening on {host or '0.0.0.0'}:{port} (every interface); serving http://127.0.0.1:{port}/metrics"
    shown = host_port(host, port)
    return f"listening on {shown}; serving http://{shown}/metrics"


def check_apart(address: str, jobs_address: str | None) -> None:
    """A jobs address on the metrics port would fail to bind as if another process held it: say why."""
    port = split_address(address)[1]
    if jobs_address is not None and port != 0 and split_address(jobs_address)[1] == port:
        raise ValueError(
            f"the jobs API's address {jobs_address} (--web.jobs-listen-address, else "
            f"global.jobs_listen_address) is on the metrics port {port}: give it a port of its own"
        )


def jobs_line(sockets: list[socket.socket] | None) -> str:
    """Where the jobs API listens apart from /metrics, as bound ("" when beside it)."""
    if not sockets:
        return ""
    host, port = sockets[0].getsockname()[:2]
    return f"; the jobs API and /-/reload on {host_port(host, port)}"


def run(args: argparse.Namespace) -> int:
    """Exit 0 after a clean shutdown, 1 on a bad config (every problem listed)."""
    level = args.log_level.upper().replace("WARN", "WARNING")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # APScheduler logs every job run at INFO: useful when debugging, noise otherwise.
    logging.getLogger("apscheduler").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    try:
        loaded = load_config_file(args.config_file, checks=CONFIG_CHECKS) if args.config_file else None
        address = args.listen_address or (loaded.global_.listen_address if loaded else DEFAULT_LISTEN_ADDRESS)
        jobs_address = args.jobs_listen_address or (loaded.global_.jobs_listen_address if loaded else None)
        check_apart(address, jobs_address)
        # Listen first: a port in use must stop us before a simulator or any probe starts.
        sockets = listen(address)
        jobs_sockets: list[socket.socket] | None = None
        try:
            jobs_sockets = listen(jobs_address) if jobs_address is not None else None
            with embedded_or_file(args, loaded) as config:
                daemon = Daemon(config, config_path=args.config_file)
                daemon.listen_flag = args.listen_address is not None
                serving = Serving(address, sockets, jobs_sockets, args.enable_lifecycle, args.auto_reload_s)
                event_loop.run(serve(daemon, serving))
        finally:
            for sock in [*sockets, *(jobs_sockets or [])]:
                sock.close()
    except SettingsError as exc:
        count = len(exc.problems)
        print(
            f"fluidity-exporter: {args.config_file}: {count} problem{'s' if count != 1 else ''}",
            file=sys.stderr,
        )
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"fluidity-exporter: error: {exc}", file=sys.stderr)
        return 1
    return 0


RUN_COMMAND = Command("run the exporter daemon (default: against the built-in simulator)", add_arguments, run)
