"""Tests of the simulated inference engine (``exporter.sim``)."""
