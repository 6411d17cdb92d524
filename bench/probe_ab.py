"""The probe client's CPU per chunk, this checkout against another revision, measured in pairs.

Separate runs on this project's VM wander by 10-20 % within minutes (``probe_bench.py``'s figures), so a
change worth 2-5 % of the client's CPU cannot be seen by comparing runs. Here both clients run at the
same time, on the same CPU, against one ground-truth server (``truth_server.py`` on the other), so
whatever the machine does to one it does to the other; each pair's ratio is its own measurement, and
the start order alternates. Each side is a copy of ``exporter/`` (this checkout's as it is, uncommitted
changes included, or ``git archive`` of ``--base``) with its C reads compiled the same way, imported
ahead of the installed package; the client is ``probe_bench.py``'s ``probe`` in both.

What a pair does not measure: each client shares its CPU with the other, so the figures are below a
client's alone (less idle time between wake-ups: warmer caches) and only their ratio means anything.
The goal figures are ``probe_bench.py``'s.

Usage: ``python bench/probe_ab.py [--base HEAD] [--reps 8] [--streams 100] [--requests 6]``, about
10 s a pair at the defaults. Measured at the stop that added it: the plain chunks read by their template
and the lag monitor's running answers, against the commit before them: 0.961x (0.950-0.973, all of 8
pairs below 1); with later fixes, 0.971x (7 of 8 below 1, the eighth in a stall of the VM).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from probe_bench import fetch_log, start_server  # noqa: E402  (a sibling script, not a package)


def snapshot(revision: str | None, into: Path) -> Path:
    """``exporter/`` of ``revision`` (None: this checkout as it is) under ``into``, its C reads built."""
    if revision is None:
        shutil.copytree(
            ROOT / "exporter", into / "exporter", ignore=shutil.ignore_patterns("*.so", "__pycache__")
        )
    else:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision, "exporter"], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.11.4 on
            tar.extractall(into, **safe)  # type: ignore[arg-type]
    build_reads(into / "exporter" / "probe" / "_reads.c")
    return into


def build_reads(source: Path) -> None:
    """Compile ``_reads.c`` in place, with the flags ``pyproject.toml`` gives setuptools."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [module] = config["tool"]["setuptools"]["ext-modules"]
    compiler = str(sysconfig.get_config_var("CC")).split()
    flags = str(sysconfig.get_config_var("CFLAGS")).split() + module.get("extra-compile-args", [])
    target = source.with_name("_reads" + str(sysconfig.get_config_var("EXT_SUFFIX")))
    include = sysconfig.get_paths()["include"]
    command = [*compiler, *flags, "-fPIC", f"-I{include}", "-shared", str(source), "-o", str(target)]
    subprocess.run(command, check=True)


def client_env(tree: Path) -> dict[str, str]:
    """The environment of a client that imports ``exporter`` from ``tree``; checked."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    probe = "import exporter.probe._reads as r; print(r.__file__)"
    # -P: no working directory ahead of PYTHONPATH, as for a script (the clients' is bench/)
    command = [sys.executable, "-P", "-c", probe]
    where = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    if not where.stdout.startswith(str(tree)):
        raise SystemExit(f"the client would not import the copy in {tree}: {where.stdout.strip()}")
    return env


def pair(
    url: str, envs: dict[str, dict[str, str]], order: list[str], streams: int, requests: int, cpu: int
) -> dict[str, float]:
    """One run of both clients at once, both on ``cpu``; CPU us per chunk of each."""
    fetch_log(url)  # clear the server's log
    with tempfile.TemporaryDirectory() as scratch:
        outs = {side: Path(scratch) / f"{side}.json" for side in order}
        launched = []
        for side in order:
            command = [sys.executable, str(HERE / "probe_bench.py"), "--client-run", "probe", "--url", url]
            command += [
                "--streams",
                str(streams),
                "--requests",
                str(requests),
                "--out",
                str(outs[side]),
                "--cpus",
                str(cpu),
            ]
            launched.append(subprocess.Popen(command, env=envs[side]))
        for process in launched:
            if process.wait(timeout=600) != 0:
                raise SystemExit(f"a client failed: {process.args}")
        figures = {}
        for side, out in outs.items():
            data = json.loads(out.read_text())
            chunks = sum(len(record["stamps"]) for record in data["records"])
            figures[side] = data["cpu_s"] / chunks * 1e6
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the revision to compare with (default HEAD)")
    parser.add_argument("--reps", type=int, default=8, help="pairs (default 8)")
    parser.add_argument("--streams", type=int, default=100, help="streams of each client (default 100)")
    parser.add_argument("--requests", type=int, default=6, help="requests per stream (default 6)")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs: the server on one, both clients on the other")
    with tempfile.TemporaryDirectory() as scratch:
        trees = {
            "base": snapshot(args.base, Path(scratch, "base")),
            "this": snapshot(None, Path(scratch, "this")),
        }
        envs = {side: client_env(tree) for side, tree in trees.items()}
        server, url = start_server(cpus[0])
        try:
            ratios = []
            for rep in range(args.reps):
                order = ["base", "this"] if rep % 2 == 0 else ["this", "base"]
                figures = pair(url, envs, order, args.streams, args.requests, cpus[1])
                ratios.append(figures["this"] / figures["base"])
                print(
                    f"pair {rep + 1}: base {figures['base']:.2f} us/chunk, this {figures['this']:.2f}, ratio {ratios[-1]:.3f}",
                    flush=True,
                )
        finally:
            server.terminate()
            server.wait(timeout=30)
    below = sum(ratio < 1 for ratio in ratios)
    print(
        f"this / {args.base}: CPU per chunk {statistics.median(ratios):.3f}x in the median "
        f"({min(ratios):.3f}-{max(ratios):.3f}; {below} of {len(ratios)} pairs below 1)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
