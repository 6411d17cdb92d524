"""Tests of the pure metric library, exporter.stats."""
