"""End to end over real sockets: presets through the probe client against the built-in simulator, whose
tokenizer the exact prompt builder targets, so reported prompt tokens must equal the intended ones."""

from __future__ import annotations

import numpy as np
import pytest

from exporter.load import Poisson, preset, run_load
from exporter.probe.client import ProbeClient
from exporter.probe.target import Api
from exporter.settings.target import TargetSettings
from tests.support.sim import StartSim


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_exact_prompts_and_full_outputs_against_the_simulator(api: Api, start_sim: StartSim) -> None:
    server = await start_sim()
    async with ProbeClient(TargetSettings(base_url=server.url, api=api)) as client:
        workload = preset("lmsys", api=api, max_output_tokens=24)
        rng = np.random.default_rng(0)
        specs = workload.sample(30, rng)
        run = await run_load(
            client.send,
            specs,
            arrivals=Poisson(30.0).offsets(30, rng),
            target_rate=30.0,
            prompt_tokens_exact=workload.prompt_tokens_exact,
        )
    checks = {c.name: c for c in run.checks}
    assert checks["prompt_tokens"].passed is True and checks["prompt_tokens"].observed == 0.0
    assert all(r.prompt_tokens_reported == s.prompt_tokens for r, s in zip(run.results, specs, strict=True))
    assert checks["output_tokens"].passed is True
    assert checks["success"].passed is True
    assert all(r.scheduled_at is not None and r.sent_at is not None for r in run.results)
