"""End to end over real sockets: presets through the probe client against the built-in simulator, whose
tokenizer the exact prompt builder targets, so reported prompt tokens must equal the intended ones."""

from __future__ import annotations

import numpy as np
import pytest

from exporter.load import LoadPlan, Poisson, preset, run_plan
from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from exporter.streams.request import Api, RequestSpec
from exporter.streams.result import Outcome, ttft
from tests.probe.helpers import script, settings_for
from tests.support.sim import StartSim


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_exact_prompts_and_full_outputs_against_the_simulator(api: Api, start_sim: StartSim) -> None:
    server = await start_sim()
    async with ProbeClient(TargetSettings(base_url=server.url, api=api)) as client:
        workload = preset("lmsys", api=api, max_output_tokens=24)
        rng = np.random.default_rng(0)
        specs = workload.sample(30, rng)
        run = await run_plan(
            client.send,
            LoadPlan(
                specs,
                offsets=Poisson(30.0).offsets(30, rng),
                rate=30.0,
                prompt_tokens_exact=workload.prompt_tokens_exact,
            ),
        )
    checks = {c.name: c for c in run.checks}
    assert checks["prompt_tokens"].passed is True and checks["prompt_tokens"].observed == 0.0
    assert all(r.prompt_tokens_reported == s.prompt_tokens for r, s in zip(run.results, specs, strict=True))
    assert checks["output_tokens"].passed is True
    assert checks["success"].passed is True
    assert all(r.scheduled_at is not None and r.sent_at is not None for r in run.results)


TTFT_S = 0.03


async def test_an_open_loop_keeps_its_absolute_schedule_against_the_simulator(sim: SimServer) -> None:
    """Every request due at start + offset exactly, results in plan order, the simulator's TTFT measured."""
    specs = [
        RequestSpec(prompt="hi", max_tokens=5, request_id=f"r{i}", extra_body=script(ttft=TTFT_S, gaps=0.01))
        for i in range(12)
    ]
    offsets = [0.01 * i for i in range(12)]
    async with ProbeClient(settings_for(sim)) as client:
        run = await run_plan(client.send, LoadPlan(specs, offsets))
    results = run.results
    assert [r.extra["request_id"] for r in results] == [spec.request_id for spec in specs]
    assert all(r.outcome is Outcome.OK and r.output_tokens == 5 for r in results)
    for result, offset in zip(results, offsets, strict=True):
        assert result.scheduled_at == pytest.approx(run.started_at + offset, abs=1e-9)
        # Sane, not precise: the simulator shares this VM's cores with the client.
        assert result.send_overhead_s is not None and 0 <= result.send_overhead_s < 0.2
        measured = ttft(result)
        assert measured is not None and TTFT_S - 0.0005 <= measured < TTFT_S + 0.2
