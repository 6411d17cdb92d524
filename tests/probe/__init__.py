"""Tests of the probe client (``exporter.probe``)."""
