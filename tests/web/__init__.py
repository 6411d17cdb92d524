"""Tests of the daemon's HTTP surface."""
