"""Where the probe client sends: ``/v1`` below the server's root, by the one rule for a target's URL
(``exporter.settings.addresses``), whichever spelling of the URL it is given."""

from __future__ import annotations

import pytest

from exporter.probe.client import _api_root
from exporter.settings.addresses import check_target_url
from exporter.settings.target import TargetSettings


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://h:8000", "http://h:8000/v1"),
        ("http://h:8000/v1/", "http://h:8000/v1"),
        ("https://api.example/openai/v1", "https://api.example/openai/v1"),
        # A host named v1 is no path: its requests were once sent to http://v1/models.
        ("http://v1", "http://v1/v1"),
        ("http://v1:8000", "http://v1:8000/v1"),
    ],
)
def test_the_client_and_the_config_read_a_trailing_v1_alike(given: str, root: str) -> None:
    assert _api_root(TargetSettings(given)) == root
    assert _api_root(TargetSettings(check_target_url(given))) == root
