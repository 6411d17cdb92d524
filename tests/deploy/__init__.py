"""Tests of what deploy/ holds: Prometheus rules (promtool, and a live Prometheus), Grafana alerting, and
the Kubernetes manifests and image (``kubernetes/``)."""
