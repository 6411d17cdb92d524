"""Secret header values (from ${NAME}, {env:}, {file:}, or a credential by name) never show in clear,
even when the target echoes them back: not on the index page, in /probe?debug=true, nor in the log."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.app import Daemon
from exporter.settings import parse_config
from exporter.settings.target import MASK, mask_secrets
from tests.support.daemon import serving
from tests.support.net import serving_app
from tests.support.wait import wait_for

BEARER = "sk-proj-SUBSTITUTED-7f3a9c21"
AZURE = "az-ENV-4b8e0d55aa"
FROM_FILE = "file-TOKEN-19c3e2"
LITERAL_KEY = "literal-CREDENTIAL-6d21"  # a literal value, secret by its header's name
PLAIN = "plain-trace-visible"  # no credential: shown as it is, which proves the echo reached the page
SECRETS = (BEARER, AZURE, FROM_FILE, LITERAL_KEY)
PROBE_TOKEN = "probe-token-0a1b2c3d"
CONFIG = """
global: {{probe_token: {{env: PROBE_TOKEN}}}}
targets:
  - name: echo
    url: "{url}"
    api: completions
    model: m
    calibrate_prompts: false
    headers:
      Authorization: "Bearer ${{KEY}}"
      api-key: {{env: AZURE_KEY}}
      X-Gateway-Token: {{file: "{token_file}"}}
      X-Api-Key: "{literal}"
      X-Trace: "{plain}"
modules:
  m: {{workload: {{prompt_tokens: "fixed:8", output_tokens: "fixed:1"}}, requests_per_run: 1,
       schedule: {{interval: 1h}}}}
"""


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    """A target that refuses every request quoting the headers it got, as a careless proxy might: the
    Authorization's token alone first, then every header whole (the body is cut at 200 characters)."""

    async def refuse(request: web.Request) -> web.Response:
        got = request.headers
        token = got["Authorization"].partition(" ")[2]
        quoted = f"{token} {got['api-key']} {got['X-Gateway-Token']} {got['X-Api-Key']} {got['X-Trace']}"
        return web.json_response(
            {"error": {"message": f"denied: {quoted} {got['Authorization']}"}}, status=401
        )

    app = web.Application()
    app.router.add_post("/v1/completions", refuse)
    async with serving_app(app, access_log=None) as url:
        yield url


@pytest.mark.timeout(30)
async def test_echoed_secret_headers_are_masked_on_every_page_and_in_the_log(
    echo_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token_file = tmp_path / "token"
    token_file.write_text(FROM_FILE + "\n")
    text = CONFIG.format(url=echo_url, token_file=token_file, literal=LITERAL_KEY, plain=PLAIN)
    environ = {"KEY": BEARER, "AZURE_KEY": AZURE, "PROBE_TOKEN": PROBE_TOKEN}
    daemon = Daemon(parse_config(text, environ=environ))
    auth = {"Authorization": f"Bearer {PROBE_TOKEN}"}
    async with serving(daemon) as url, aiohttp.ClientSession() as session:

        async def index() -> str:
            async with session.get(url + "/") as response:
                return await response.text()

        await wait_for(lambda: daemon.targets["echo"].health.last_error is not None, what="the refused probe")
        page = await index()
        async with session.get(url + "/probe?target=echo&module=m&debug=true", headers=auth) as response:
            debug = await response.text()
    assert PLAIN in page and PLAIN in debug and "denied" in debug  # the echo is shown...
    shown = {"index page": page, "/probe?debug=true": debug, "log": caplog.text, "repr": repr(daemon.config)}
    leaks = [(where, secret) for where, text in shown.items() for secret in SECRETS if secret in text]
    assert not leaks  # ...and not one secret of it
    assert MASK in page and MASK in debug


def test_a_secret_cut_short_at_the_end_of_a_text_is_masked_too() -> None:
    assert mask_secrets(f"denied: {BEARER} and {BEARER[:9]}", (BEARER,)) == f"denied: {MASK} and {MASK}"
    assert mask_secrets("denied: abc", (BEARER,)) == "denied: abc"
