"""The jobs API over loopback, shared by the live jobs tests: the daemon's config, its token, a call to
the API, waiting for a job to end, and the slowed simulator they drive (the ``slow_sim`` fixture).

The simulator is slowed down (20 ms per step plus 2 ms per running sequence, 20 us per prompt token, like
an 8B model on one GPU) so that a 50 ms decode deadline is reached at a load a loopback client on two
cores sends comfortably.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

TOKEN = "jobs-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOW_COST = {"step_overhead_s": 0.02, "per_seq_s": 0.002, "prefill_per_token_s": 2e-5}
BUDGET = 8192  # every profiled prompt is prefilled in one step: the curve is smooth, not a staircase
SEQS = 8  # at most 8 streams at once: about 14 req/s of 16-token requests, then the queue grows
SLOW_SIM = {"preset": "tiny", "cost": SLOW_COST, "max_num_batched_tokens": BUDGET, "max_num_seqs": SEQS}
CONFIG = """
global:
  state_dir: {state}
  windows: [5m]  # probed every second: a 1h window would need 3,600 results
targets:
  - name: sim
    url: {url}
    api: completions
    simulated: true
    modules: [short]
modules:
  short:
    workload: {{prompt_tokens: "uniform:low=32,high=96", output_tokens: "fixed:16"}}
    requests_per_run: 1
    schedule: {{interval: 1s}}
jobs:
  api_token: {{file: {token}}}
  limits: {{max_rate: 60, max_tokens: 2000000, max_duration: 5m}}
"""


def write_config(tmp_path: Path, url: str, jobs: str = "") -> Path:
    """The daemon's config for the simulator at ``url`` (``jobs`` lines appended to its jobs section)."""
    token = tmp_path / "token"
    token.write_text(TOKEN)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(url=url, state=tmp_path / "state", token=token) + jobs)
    return path


async def call(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """Status and JSON answer of one jobs API call, with the token unless ``headers`` says otherwise."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body, headers=AUTH if headers is None else headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def finished(url: str, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
    """The job's record once it is no longer running; fails the test after ``timeout`` s with its progress."""
    deadline = time.monotonic() + timeout
    while True:
        status, record = await call("GET", f"{url}/api/v1/jobs/{job_id}")
        assert status == 200
        if record["state"] != "running":
            return dict(record)
        assert time.monotonic() < deadline, f"job still running: {record['progress']}"
        await asyncio.sleep(0.2)
