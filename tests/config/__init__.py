"""Tests of exporter.config: the daemon's YAML, its validation (a table of bad configs with exact messages)."""
