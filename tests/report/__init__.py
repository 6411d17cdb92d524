"""Tests of the report layer."""
