"""``python -m scripts.real_engines``: set up, start, stop and list the real engines.

    python -m scripts.real_engines setup [llamacpp|vllm ...]   # build/install what is missing (all)
    python -m scripts.real_engines start llamacpp [--port N]   # in the background, on 127.0.0.1
    python -m scripts.real_engines stop llamacpp
    python -m scripts.real_engines status

A started engine's pid, port and log are kept in ``<cache>/run/<engine>.json`` until it is stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from scripts.real_engines.cache import cache_root, is_ready
from scripts.real_engines.engines import ENGINES, engine
from scripts.real_engines.server import free_port, live_members, stop_group


def _run_file(name: str) -> Path:
    return cache_root() / "run" / f"{name}.json"


def _started(name: str) -> dict[str, Any] | None:
    """What ``start`` recorded (pid, url, log) for the engine it left running, or None; a record whose
    process died is removed."""
    path = _run_file(name)
    if not path.exists():
        return None
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if not live_members(int(record["pid"])):
        path.unlink()
        return None
    return record


def setup(names: list[str]) -> int:
    for name in names or list(ENGINES):
        started = time.monotonic()
        folder = engine(name).ensure()
        print(f"{name}: ready in {folder} ({time.monotonic() - started:.0f} s)")
    return 0


def start(name: str, port: int | None) -> int:
    chosen = engine(name)
    if _started(name) is not None:
        print(f"{name} is already started ({_run_file(name)}); stop it first", file=sys.stderr)
        return 1
    chosen.ensure()
    port = port or free_port()
    log = cache_root() / "run" / f"{name}.log"
    server = chosen.server(port, log).start()
    assert server.process is not None
    _run_file(name).write_text(
        json.dumps({"pid": server.process.pid, "url": server.base_url, "log": str(log)}), encoding="utf-8"
    )
    print(f"{name} serves {server.base_url} (started in {server.startup_s:.0f} s; log {log})")
    return 0


def stop(name: str) -> int:
    record = _started(name)
    if record is None:
        print(f"{name} is not started", file=sys.stderr)
        return 1
    stop_group(int(record["pid"]))
    _run_file(name).unlink()
    print(f"{name} stopped")
    return 0


def status() -> int:
    for name, chosen in ENGINES.items():
        built = is_ready(chosen.folder())
        record = _started(name)
        where = record["url"] if record is not None else "not started"
        print(f"{name}: {'built ' + chosen.version() if built else 'not built'}; {where}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.real_engines", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup").add_argument("engines", nargs="*", metavar="ENGINE", help="default: all")
    for command in ("start", "stop"):
        sub.add_parser(command).add_argument("engine", choices=list(ENGINES))
    sub.choices["start"].add_argument("--port", type=int, help="default: a free port")
    sub.add_parser("status")
    args = parser.parse_args(argv)
    (cache_root() / "run").mkdir(parents=True, exist_ok=True)
    if args.command == "setup":
        try:
            for name in args.engines:
                engine(name)
        except ValueError as exc:
            parser.error(str(exc))
        return setup(args.engines)
    if args.command == "start":
        return start(args.engine, args.port)
    if args.command == "stop":
        return stop(args.engine)
    return status()


if __name__ == "__main__":
    sys.exit(main())
