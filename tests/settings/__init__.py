"""Tests of exporter.settings: the daemon's YAML and its validation (a table of bad configs with exact
messages), and what each setting means and how it is read for YAML, JSON and flags alike."""
