"""The tests that need the ``traffic`` extra (grpcio) are not collected where it is not installed (the
test extra brings it, and CI installs that), so the rest of the suite runs on a core install."""

from __future__ import annotations

import importlib.util

NEEDS_GRPC = [
    "test_observer.py",
    "test_through_envoy.py",
    "test_daemon_traffic.py",
    "test_demo_traffic.py",
    "test_traffic_live.py",
]
collect_ignore = NEEDS_GRPC if importlib.util.find_spec("grpc") is None else []
