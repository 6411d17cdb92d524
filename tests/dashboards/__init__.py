"""Tests of the Grafana dashboards: generated JSON up to date, structure, and every query run for real."""
