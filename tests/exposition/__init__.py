"""Tests of exporter.exposition: metric names, the result store, collectors and self-metrics."""
