"""A daemon's job sends its trials' load from a worker process of its own by default, not from the
daemon's event loop, where the daemon's probes, scrapes and ``/metrics`` delayed the trials' reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.app import Daemon
from exporter.settings import load_config_file
from exporter.sim import SimServer
from tests.jobs.live import call, finished, write_config
from tests.support.daemon import serving

pytestmark = pytest.mark.slow
TRIAL_REQUESTS = 20
SEARCH = {
    "target": "sim", "start": 8, "max_trials": 1, "requests_per_trial": TRIAL_REQUESTS,
    "warmup_requests": 2, "slo": {"prefill_deadline_s": 1.0},
}  # fmt: skip


@pytest.mark.timeout(120)
async def test_a_capacity_job_sends_its_trials_from_a_worker_process_by_default(
    slow_sim: SimServer, tmp_path: Path
) -> None:
    daemon = Daemon(load_config_file(write_config(tmp_path, slow_sim.url)), seed=1)
    async with serving(daemon) as url:
        client = daemon.pool.states["sim"].client
        sent_here: list[Any] = []
        send = client.send

        async def counted(*args: Any, **kwargs: Any) -> Any:
            sent_here.append(args[0])
            return await send(*args, **kwargs)

        client.send = counted  # type: ignore[method-assign]
        status, record = await call("POST", f"{url}/api/v1/jobs/capacity", SEARCH)
        assert status == 202, record
        done = await finished(url, record["id"])
    # The trial ran (on a busy machine its worker may be saturated: then the job fails saying so).
    if done["state"] == "succeeded":
        assert done["result"]["trial_count"] == 1 and done["result"]["workers"] == 1
    else:
        assert "shard 0 was saturated" in done["error"] and "during trial 1" in done["error"], done
    # What the daemon's own client sent: the job's model and calibration questions and the probes,
    # never the trial (before: its 22 requests, warm-up included, all from the daemon's loop).
    assert len(sent_here) < TRIAL_REQUESTS, len(sent_here)
