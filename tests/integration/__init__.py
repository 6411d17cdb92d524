"""Infrastructure shared by the tests that run real servers together (Prometheus, the daemon, the
simulator)."""
