"""Tests against real inference engines (llama.cpp's llama-server, vLLM's CPU build): marked
``real_engine``; the engines are set up on first use by ``scripts.real_engines`` (cached, once)."""

import pytest

# Each module's first test also pays for its engine's set-up (a build or install on first use, ~10-13
# min, then the model's load), and the tests send real load to an engine on CPUs: they get 30 minutes
# each instead of the suite's default, which is sized for the simulator.
REAL_ENGINE_TIMEOUT_S = 1800
REAL_ENGINE = [pytest.mark.real_engine, pytest.mark.timeout(REAL_ENGINE_TIMEOUT_S)]
