"""Without chunked prefill, a prompt longer than the token budget must still run (vLLM's rule)."""

from __future__ import annotations

import dataclasses

from exporter.sim.engine import Emission, Engine, SimRequest, run_virtual
from exporter.sim.engine_presets import PRESETS


def test_prompt_longer_than_the_step_budget_is_served_whole() -> None:
    preset = PRESETS["llama-3.1-8b-h100"]
    params = dataclasses.replace(preset.engine, chunked_prefill=False)
    assert params.max_num_batched_tokens < 6000 <= params.max_model_len
    requests = [SimRequest(6000, 4, "length", 0.0), SimRequest(100, 4, "length", 0.0, seed=1)]
    tokens: dict[int, int] = {}

    def count(_: float, emission: Emission) -> None:
        key = id(emission.request)
        tokens[key] = tokens.get(key, 0) + emission.tokens

    run_virtual(Engine(params, preset.cost), [(0.0, r) for r in requests], count)
    assert [tokens.get(id(r), 0) for r in requests] == [4, 4]
