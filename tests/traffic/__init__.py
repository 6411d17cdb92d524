"""Tests of the traffic observer (exporter/traffic/): the Envoy bootstrap, the ext_proc server, records."""
