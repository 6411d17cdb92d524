"""A reload cannot move the running observer: a changed ``traffic:`` section is said aloud."""

from __future__ import annotations

from exporter.daemon.config_facts import unapplied_changes
from exporter.settings import parse_config

OBSERVE = "traffic: {{ext_proc_address: '127.0.0.1:9469', models: [{model}]}}\n"


def test_a_changed_traffic_section_is_reported_as_not_applied() -> None:
    old, new = parse_config(OBSERVE.format(model="a")), parse_config(OBSERVE.format(model="b"))
    assert unapplied_changes(old, new, None, False) == [
        "traffic changed: the observer keeps its previous settings until the exporter is restarted"
    ]
    assert unapplied_changes(old, parse_config(OBSERVE.format(model="a")), None, False) == []
