"""A daemon serving its web app on loopback, and reading what it exposes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Daemon, web_app
from tests.support.net import serving_app

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextlib.asynccontextmanager
async def serving(daemon: Daemon, *, metrics_max_age_s: float = 0.0) -> AsyncIterator[str]:
    """The daemon started with its web app on a free loopback port; yields the base URL. ``/metrics``
    is rendered for every scrape unless told otherwise: the tests compare it with what just happened."""
    app = web_app(daemon, enable_lifecycle=True, metrics_max_age_s=metrics_max_age_s)
    async with serving_app(app) as url:  # starts and stops it
        yield url


async def get(url: str) -> tuple[int, str]:
    """Status and body of a GET."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(series: Samples, name: str, **labels: str) -> float:
    """One sample's value; a KeyError names the series that is missing."""
    return series[(name, tuple(sorted(labels.items())))]
