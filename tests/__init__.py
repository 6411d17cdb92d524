"""Tests of the fluidity exporter."""
