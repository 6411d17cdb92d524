"""The ``traffic:`` section: a config that only observes is valid (bad values: test_bad_configs.py)."""

from __future__ import annotations

from exporter.settings import parse_config
from exporter.settings.traffic import TrafficConfig


def test_a_config_with_only_global_and_traffic_probes_nothing() -> None:
    config = parse_config(
        'global: {listen_address: ":9468"}\ntraffic: {ext_proc_address: "127.0.0.1:9469"}\n'
    )
    assert config.targets == () and config.probes() == ()
    assert config.traffic == TrafficConfig("127.0.0.1:9469")


def test_its_values_are_read() -> None:
    text = "slos: {users: {}}\ntraffic: {ext_proc_address: ':9469', slo: users, models: [a, b], max_streams: 8}\n"
    assert parse_config(text).traffic == TrafficConfig(":9469", "users", ("a", "b"), 8)
