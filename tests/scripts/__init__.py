"""Tests of the developer scripts (``scripts/``)."""
