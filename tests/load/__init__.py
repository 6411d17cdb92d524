"""Tests of exporter.load: distributions, arrivals, presets, prompts, trace loaders, runner, health."""
