"""Fetching an engine's ``/metrics`` over HTTP: network I/O only, every target failure a result.

``scrape(session, Page(url), timeout)`` GETs the page with the caller's ``aiohttp.ClientSession``, stamps
the monotonic time the body arrived, and hands the text to the pure ``parse_exposition``. Like the
probers, it never raises for a failure of the target: a refused connection, a non-200 status, a deadline
or a body that is not exposition text each come back as a ``ScrapeResult`` with a ``ScrapeFailure`` reason
and a detail line. What a target sends is bounded: the body (``MAX_BODY_BYTES``), the headers (aiohttp's
own limits: 128 headers of 8 KiB each at most), and redirects, which are followed only to the same scheme,
host and port (``MAX_REDIRECTS`` of them): the request's headers may carry a bearer token, and the page of
another host is not this engine's. ``CancelledError`` propagates; an explicit engine kind that does not
exist is a configuration error of ours and raises ``UnknownEngineError`` before any I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import aiohttp
from yarl import URL

from exporter.engine.catalogue import AUTO, ENGINE_CATALOGUE, Catalogue, EngineFamilies
from exporter.engine.snapshot import EngineSnapshot, ExpositionError, parse_exposition

# Ask for the classic text format: a prometheus_client server would otherwise answer OpenMetrics to a
# client that accepts it, and Prometheus' own negotiation may prefer protobuf.
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
# vLLM's page is about 100 KiB with one model; this bound only stops a runaway body from filling memory.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Enough for a path that gains or loses its slash (a prometheus_client app mounted at /metrics answers
# 307 to /metrics/) and a login-free proxy's hop; a loop of them is a failure, not a wait.
MAX_REDIRECTS = 3

Clock = Callable[[], float]


class ScrapeFailure(StrEnum):
    """Why a scrape produced no snapshot."""

    CONNECT_ERROR = "connect_error"  # no connection, or it broke before the whole body arrived
    HTTP_STATUS = "http_status"  # an answer other than 200
    TIMEOUT = "timeout"  # the whole exchange took longer than the deadline
    PARSE_ERROR = "parse_error"  # not exposition text, or no engine metrics in it
    TOO_LARGE = "too_large"  # the body over MAX_BODY_BYTES, or headers over aiohttp's limits


@dataclass(frozen=True)
class ScrapeResult:
    """A snapshot, or the reason there is none; ``duration_s`` is how long the scrape took."""

    snapshot: EngineSnapshot | None
    failure: ScrapeFailure | None
    detail: str
    duration_s: float

    @property
    def ok(self) -> bool:
        """Whether a snapshot was read."""
        return self.snapshot is not None


@dataclass(frozen=True)
class Page:
    """A metrics page to scrape: where, which engine's (or gateway's) families it holds, and how to ask.

    ``catalogue`` is where ``kind`` is looked up: the engines, or the gateways (a second scrape).
    ``headers`` go with the request (an ``Authorization`` header: llm-d's endpoint picker checks a
    Kubernetes bearer token on /metrics by default). ``model``: only that model's series are read.
    """

    url: str
    kind: str | EngineFamilies = AUTO
    model: str | None = None
    catalogue: Catalogue = ENGINE_CATALOGUE
    headers: Mapping[str, str] = field(default_factory=dict)


async def scrape(
    session: aiohttp.ClientSession,
    page: Page,
    timeout: float,
    clock: Clock = time.monotonic,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> ScrapeResult:
    """GET ``page`` within ``timeout`` seconds and parse it; never raises for a target failure."""
    kind, catalogue = page.kind, page.catalogue
    if isinstance(kind, str) and kind != AUTO:
        catalogue.families_for(kind)  # a misspelt kind is our configuration error: raise before any I/O
    started = clock()
    try:
        async with asyncio.timeout(timeout):
            status, body = await _fetch(session, page.url, max_body_bytes, page.headers)
    except TimeoutError:
        return _failed(ScrapeFailure.TIMEOUT, f"no complete answer within {timeout:g} s", started, clock)
    except BodyTooLargeError as exc:
        return _failed(ScrapeFailure.TOO_LARGE, str(exc), started, clock)
    except RedirectError as exc:
        return _failed(ScrapeFailure.HTTP_STATUS, str(exc), started, clock)
    except aiohttp.ClientResponseError as exc:
        if _head_too_large(exc):  # its message quotes the target's bytes: only its first words said
            detail = f"response headers too large ({str(exc.message).partition(':')[0]})"
            return _failed(ScrapeFailure.TOO_LARGE, detail, started, clock)
        return _failed(ScrapeFailure.CONNECT_ERROR, _describe(exc), started, clock)
    except aiohttp.ClientError as exc:
        return _failed(ScrapeFailure.CONNECT_ERROR, _describe(exc), started, clock)
    at = clock()
    if status != 200:
        return _failed(ScrapeFailure.HTTP_STATUS, f"HTTP {status}", started, clock)
    return _parse(body, page, started, at)


async def _fetch(
    session: aiohttp.ClientSession, url: str, limit: int, headers: Mapping[str, str]
) -> tuple[int, bytes]:
    target = URL(url)
    for _ in range(MAX_REDIRECTS + 1):
        async with session.get(
            target, headers={**headers, "Accept": ACCEPT}, allow_redirects=False
        ) as response:
            if response.status in _REDIRECTS and "Location" in response.headers:
                target = _same_origin(target, response.headers["Location"], response.status)
                continue
            if response.status != 200:
                return response.status, b""
            return response.status, await _read_capped(response, limit)
    raise RedirectError(f"more than {MAX_REDIRECTS} redirects")


_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _same_origin(current: URL, location: str, status: int) -> URL:
    """Where a redirect from ``current`` leads, when that is the same scheme, host and port."""
    following = current.join(URL(location))
    if following.origin() != current.origin():
        raise RedirectError(f"HTTP {status} to another host ({following.origin()}), not followed")
    return following


class RedirectError(Exception):
    """A redirect that is not followed (another host, or too many); reported as an HTTP status."""


def _head_too_large(exc: aiohttp.ClientResponseError) -> bool:
    """Whether aiohttp refused the response's head for its size (a line, a field or too many headers)."""
    message = str(exc.message)
    return exc.status == 400 and ("Got more than" in message or "Too many headers" in message)


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class BodyTooLargeError(Exception):
    """The page is over ``MAX_BODY_BYTES``; reported as ``TOO_LARGE``."""


def _parse(body: bytes, page: Page, started: float, at: float) -> ScrapeResult:
    duration = at - started
    try:
        text = body.decode("utf-8")
        snapshot = parse_exposition(text, at, kind=page.kind, model=page.model, catalogue=page.catalogue)
    except UnicodeDecodeError as exc:
        return ScrapeResult(None, ScrapeFailure.PARSE_ERROR, f"body is not UTF-8: {exc.reason}", duration)
    except ExpositionError as exc:
        return ScrapeResult(None, ScrapeFailure.PARSE_ERROR, str(exc), duration)
    return ScrapeResult(snapshot, None, "", duration)


def _failed(reason: ScrapeFailure, detail: str, started: float, clock: Clock) -> ScrapeResult:
    return ScrapeResult(None, reason, detail, clock() - started)


def _describe(exc: aiohttp.ClientError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
