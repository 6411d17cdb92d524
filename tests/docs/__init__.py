"""Tests that README.md and docs/ say what the code does: links, commands, flags, metrics, config keys."""
