"""``TargetModel``: the model a client's requests name, and the target's answer when it is asked.

A target's settings may name the model; when they do not, the first model ``GET /v1/models`` lists is
asked once (however many requests wait for it) and kept. A target that cannot say raises
``TargetError``, whose message names the URL and, for the statuses that have one, the likely cause.
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus

from exporter.probe.connector import Connector
from exporter.probe.http import HttpError, ResponseTooLargeError
from exporter.settings.target import TargetSettings, mask_secrets
from exporter.streams.result import Outcome


class TargetError(Exception):
    """A setup call to the target (``resolve_model``) failed; the message names the URL."""

    def __init__(self, outcome: Outcome, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status

    def explain(self) -> str:
        """The failure as a user reads it: "did not answer" only when nothing answered (a 404 is an
        answer, and most often a wrong path in the URL)."""
        silent = self.outcome in (Outcome.CONNECT_ERROR, Outcome.TOTAL_TIMEOUT)
        return f"the target did not answer: {self}" if silent else f"the target {self}"


def _status_answer(url: str, status: int) -> str:
    """``GET url answered 404 Not Found``, with the likely cause of the statuses that have one."""
    try:
        phrase = f" {HTTPStatus(status).phrase}"
    except ValueError:
        phrase = ""
    hint = {
        404: ": is the URL's path right? (--url or targets[].url is the server's base, e.g. "
        "http://host:8000; /v1 is added when it is not there)",
        401: ": is the API key right? (--api-key-env, --api-key-file or targets[].api_key)",
        403: ": is the API key right? (--api-key-env, --api-key-file or targets[].api_key)",
    }.get(status, "")
    return f"answered GET {url} with {status}{phrase}{hint}"


def listed_model(url: str, status: int, body: bytes) -> str:
    """The first model of ``GET url``'s answer (``status``, ``body``: ``/v1/models``' list); raises
    ``TargetError`` when the answer lists none."""
    if status != 200:
        raise TargetError(Outcome.HTTP_STATUS, _status_answer(url, status), status)
    try:
        return str(json.loads(body)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise TargetError(
            Outcome.MALFORMED_STREAM, f"answered GET {url} with no model listed in the answer"
        ) from None


class TargetModel:
    """The model of ``settings``, else the first that ``url`` (the target's ``/v1/models``) lists,
    asked through ``connector``."""

    def __init__(self, settings: TargetSettings, connector: Connector, url: str) -> None:
        self.name = settings.model  # None until known
        self._settings = settings
        self._connector = connector
        self._url = url
        self._lock = asyncio.Lock()

    async def resolve(self) -> str:
        """The model's name (asked at most once); raises ``TargetError`` when the target cannot say."""
        if self.name is not None:
            return self.name
        async with self._lock:  # one GET, however many requests wait for it
            if self.name is None:
                self.name = await self._fetch()
            return self.name

    async def _fetch(self) -> str:
        url, timeouts = self._url, self._settings.timeouts
        limit = timeouts.ttft or timeouts.total
        try:
            async with asyncio.timeout(limit):
                status, body = await self._connector.get("/models")
        except TimeoutError:  # before OSError, of which it is a subclass
            raise TargetError(Outcome.TOTAL_TIMEOUT, f"GET {url}: no answer within {limit} s") from None
        except ResponseTooLargeError as exc:
            raise TargetError(Outcome.TOO_LARGE, f"GET {url}: {exc}") from None
        except (HttpError, OSError) as exc:
            scrubbed = mask_secrets(str(exc), self._settings.secret_texts())
            raise TargetError(Outcome.CONNECT_ERROR, f"GET {url}: {scrubbed}") from None
        return listed_model(url, status, body)
