"""The engine scrape and the probes of a live daemon run apart in time: a scrape waits for the probes
in flight, instead of parsing the engine's page while they read."""

from __future__ import annotations

import pytest

from exporter.app import Daemon
from exporter.engine.scrape import ScrapeResult
from exporter.settings.parse import load_config
from tests.support.wait import wait_for

CONFIG = """
global: {{windows: [1m]}}
targets:
  - name: sim
    url: {url}
    api: completions
    simulated: true
    engine_metrics: {{url: "{url}/metrics", kind: vllm, interval: 4s}}
modules:
  stream:
    workload: {{prompt_tokens: "fixed:32", output_tokens: "fixed:24"}}
    requests_per_run: 2
    concurrency: 2
    schedule: {{interval: 1s}}
"""


@pytest.mark.timeout(30)
async def test_no_scrape_lands_while_a_probe_is_in_flight(sim_url: str) -> None:
    daemon = Daemon(load_config(CONFIG.format(url=sim_url)), seed=1)
    probing_at_scrape: list[bool] = []
    add = daemon.store.add_engine_scrape

    def spy(target: str, result: ScrapeResult) -> None:
        probing_at_scrape.append(daemon.pool.probing)
        add(target, result)

    daemon.store.add_engine_scrape = spy  # type: ignore[method-assign]
    await daemon.start()
    try:
        # Both start at once (run_now): in step, the first scrape landed in the middle of the first
        # probe run. A scrape waits for the probes at most half its interval (2 s here): the first
        # probe run of a cold daemon on a busy CI machine once took longer than the 1 s of a 2 s one.
        await wait_for(lambda: len(probing_at_scrape) >= 3, timeout=20, what="three engine scrapes")
    finally:
        await daemon.stop()
    assert not any(probing_at_scrape), probing_at_scrape
