"""Tests against real inference engines (llama.cpp's llama-server, vLLM's CPU build): marked
``real_engine``; the engines are set up on first use by ``scripts.real_engines`` (cached, once)."""
