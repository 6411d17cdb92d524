"""Tests of exporter.engine: scraping and deriving from an engine's own /metrics."""
