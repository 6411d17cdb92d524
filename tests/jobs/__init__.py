"""Tests of the on-demand jobs."""
