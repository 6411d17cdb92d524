"""TLS: verification is on by default, a CA file makes a private certificate trusted, and verification
can be turned off. A real TLS server on 127.0.0.1:0 with a throwaway self-signed certificate."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome

ONE_TOKEN_SSE = b'data: {"choices":[{"text":" a","finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
FAST = Timeouts(connect=2.0, ttft=2.0, idle=2.0, total=5.0)

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for IP 127.0.0.1 and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    key_options = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            *key_options,
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            *subject,
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


@pytest.fixture
async def tls_url(certificate: tuple[Path, Path]) -> AsyncIterator[str]:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(ONE_TOKEN_SSE)
        return resp

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"https://{host}:{port}"
    await runner.cleanup()


async def _send(settings: TargetSettings) -> Outcome:
    async with ProbeClient(settings) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=1))
    assert not result.kernel_stamps  # TLS reads go through the loop's transport, stamped on reading
    return result.outcome


async def test_untrusted_certificate_is_refused_by_default(tls_url: str) -> None:
    settings = TargetSettings(base_url=tls_url, api="completions", model="m", timeouts=FAST)
    assert await _send(settings) is Outcome.CONNECT_ERROR


async def test_ca_file_trusts_a_private_certificate(tls_url: str, certificate: tuple[Path, Path]) -> None:
    settings = TargetSettings(
        base_url=tls_url, api="completions", model="m", timeouts=FAST, ca_file=str(certificate[0])
    )
    assert await _send(settings) is Outcome.OK


async def test_verification_can_be_turned_off(tls_url: str) -> None:
    settings = TargetSettings(base_url=tls_url, api="completions", model="m", timeouts=FAST, verify_tls=False)
    assert await _send(settings) is Outcome.OK
