"""``/probe`` cut by the scrape timeout against a target that never answers: what it sent is charged to
the target's budget and the cut run feeds the back-off; a scrape timeout header that is not a positive,
finite number of seconds is a 400."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from exporter.app import Daemon
from exporter.settings.parse import load_config
from exporter.web.routes import MAX_PROBE_TIMEOUT_S, SCRAPE_TIMEOUT_HEADER, probe_timeout
from tests.support.daemon import samples, serving
from tests.support.net import serving_app

BURST = 5  # requests of one on-demand run
STALL_S = 3.0  # the target's answer: long past the probes' 1 s timeout, short enough for the shutdown


@contextlib.asynccontextmanager
async def stalling_target() -> AsyncIterator[tuple[str, list[str]]]:
    """A target that takes every POST and answers it only after ``STALL_S`` (far past the scrape
    timeout); yields its URL and the paths posted to it."""
    posted: list[str] = []

    async def stall(request: web.Request) -> web.Response:
        posted.append(request.path)
        await asyncio.sleep(STALL_S)
        return web.Response(status=504)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]})

    app = web.Application()
    app.router.add_post("/{tail:.*}", stall)
    app.router.add_get("/v1/models", models)
    async with serving_app(app) as url:
        yield url, posted


def config(url: str, budget: str) -> str:
    return (
        "targets:\n"
        f"  - {{name: slow, url: '{url}', api: completions, simulated: true, modules: [idle],\n"
        f"     budget: {{{budget}}}}}\n"
        "modules:\n"
        "  idle: {workload: {prompt_tokens: 'fixed:8', output_tokens: 'fixed:2'}, schedule: {interval: 1h}}\n"
        "  burst:\n"
        "    workload: {prompt_tokens: 'fixed:8', output_tokens: 'fixed:2'}\n"
        f"    requests_per_run: {BURST}\n"
        f"    concurrency: {BURST}\n"
        "    schedule: {interval: 1h}\n"
    )


async def probe_reason(session: aiohttp.ClientSession, url: str) -> str:
    """The failure reason of one ``/probe`` of ``burst`` cut at a 1 s scrape timeout."""
    headers = {SCRAPE_TIMEOUT_HEADER: "1"}
    async with session.get(f"{url}/probe?target=slow&module=burst", headers=headers) as response:
        assert response.status == 200
        text = await response.text()
    reasons = [labels for (name, labels), _ in samples(text).items() if name == "fluidity_probe_failure_info"]
    assert len(reasons) == 1, text
    return dict(reasons[0])["reason"]


@pytest.mark.timeout(30)
async def test_a_cut_probe_is_charged_so_the_budget_stops_the_next_ones() -> None:
    async with stalling_target() as (target_url, posted):
        # The scheduled run of idle sends 1 at start-up; two cut bursts take 11 of 12; a third is refused.
        daemon = Daemon(
            load_config(config(target_url, "max_requests_per_hour: 12, backoff_after_failures: 100"))
        )
        async with serving(daemon) as url, aiohttp.ClientSession() as session:
            reasons = [await probe_reason(session, url) for _ in range(4)]
    assert reasons == ["scrape_timeout", "scrape_timeout", "over_requests", "over_requests"]
    assert len(posted) <= 2 * BURST + 1  # before the fix: 4 bursts, 21 requests to a budget of 12


@pytest.mark.timeout(30)
async def test_a_cut_probe_counts_as_a_failed_run_for_the_back_off() -> None:
    async with stalling_target() as (target_url, _posted):
        daemon = Daemon(load_config(config(target_url, "backoff_after_failures: 2")))
        async with serving(daemon) as url, aiohttp.ClientSession() as session:
            reasons = [await probe_reason(session, url) for _ in range(3)]
            health = daemon.targets["slow"].health
            state, error = health.state, health.last_error
    assert reasons == ["scrape_timeout", "scrape_timeout", "backing_off"]
    assert state == "backing_off" and error is not None
    assert (error.outcome, error.module) == ("cut", "burst")


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "0", "-3", "soon", "1e400"])
def test_a_scrape_timeout_that_is_not_positive_finite_seconds_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=f"{SCRAPE_TIMEOUT_HEADER}: expected a positive number of seconds"):
        probe_timeout(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 120.0),
        ("10", 9.5),
        ("0.2", 0.5),
        ("86400", MAX_PROBE_TIMEOUT_S),
        ("1e300", MAX_PROBE_TIMEOUT_S),
    ],
)
def test_the_scrape_timeout_keeps_a_margin_a_floor_and_a_ceiling(raw: str | None, expected: float) -> None:
    assert probe_timeout(raw) == expected


@pytest.mark.timeout(30)
@pytest.mark.parametrize("raw", ["nan", "inf"])
async def test_nan_and_inf_as_the_scrape_timeout_are_a_bad_request(raw: str) -> None:
    async with stalling_target() as (target_url, _posted):
        daemon = Daemon(load_config(config(target_url, "")))
        async with (
            serving(daemon) as url,
            aiohttp.ClientSession() as session,
            session.get(
                f"{url}/probe?target=slow&module=burst", headers={SCRAPE_TIMEOUT_HEADER: raw}
            ) as response,
        ):
            assert response.status == 400
            assert await response.text() == (
                f"{SCRAPE_TIMEOUT_HEADER}: expected a positive number of seconds, got {raw!r}\n"
            )
