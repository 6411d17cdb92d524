"""A reload that removes a target or a module while its scheduled probe runs: the probe ends quietly,
its results are dropped, and none of the removed job's series comes back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.app import Daemon
from exporter.settings import load_config_file
from tests.support.daemon import get, samples, serving
from tests.support.net import serving_app
from tests.support.wait import wait_for

ONE_TOKEN_SSE = (
    b'data: {"choices":[{"text":" a","finish_reason":"length"}],"usage":{"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)
CONFIG = """
targets:
  - {{name: {target}, url: "{url}", api: completions, model: m, calibrate_prompts: false, modules: [{modules}]}}
modules:
  held: {{workload: {{prompt_tokens: "fixed:8", output_tokens: "fixed:1"}}, requests_per_run: 1,
          schedule: {{interval: 1h}}}}
  other: {{workload: {{prompt_tokens: "fixed:8", output_tokens: "fixed:1"}}, requests_per_run: 1,
           schedule: {{interval: 1h}}}}
"""


@dataclass
class Gate:
    """A completions server that holds every request until ``opened``; ``url`` once serving."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: int = 0
    url: str = ""


@pytest.fixture
async def gate() -> AsyncIterator[Gate]:
    held = Gate()

    async def complete(request: web.Request) -> web.StreamResponse:
        held.arrived += 1
        await held.opened.wait()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(ONE_TOKEN_SSE)
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    async with serving_app(app, access_log=None) as url:
        held.url = url
        yield held


def ended(caplog: pytest.LogCaptureFixture) -> str:
    """The ids of the scheduled runs that ended, as APScheduler logs them."""
    return " ".join(r.getMessage() for r in caplog.records if "executed successfully" in r.getMessage())


@pytest.mark.parametrize(
    ("target", "modules", "gone"),
    [("b", "held", {"target": "a"}), ("a", "other", {"module": "held"})],
    ids=["target removed", "module removed"],
)
@pytest.mark.timeout(30)
async def test_a_probe_whose_target_or_module_a_reload_removed_ends_quietly(
    gate: Gate,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    target: str,
    modules: str,
    gone: dict[str, str],
) -> None:
    caplog.set_level(logging.INFO)
    # The run command quiets APScheduler's own logger; a test of it in this process may have run first.
    caplog.set_level(logging.INFO, logger="apscheduler")
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(target="a", url=gate.url, modules="held"))
    daemon = Daemon(load_config_file(path), config_path=str(path))
    async with serving(daemon) as url:
        await wait_for(lambda: gate.arrived == 1, what="the scheduled probe of a/held at the target")
        path.write_text(CONFIG.format(target=target, url=gate.url, modules=modules))
        async with aiohttp.ClientSession() as session, session.post(url + "/-/reload") as response:
            assert response.status == 200
        gate.opened.set()
        await wait_for(lambda: gate.arrived >= 2, what="the new config's probe")
        await wait_for(lambda: "probe:a:held" in ended(caplog), what="the removed probe's run to end")
        await asyncio.sleep(0.1)  # its scheduler event comes on a later turn of the loop
        status, text = await get(url + "/metrics")
    assert status == 200
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    stale = [
        (name, labels)
        for name, labels in samples(text)
        if all(dict(labels).get(k) == v for k, v in gone.items())
        or dict(labels).get("job_id") == "probe:a:held"
    ]
    assert not stale
