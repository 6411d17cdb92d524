"""Addresses, checked one way wherever they are given: a target's base URL (``targets[].url``, a shard
job's target URLs, ``--url``) and a listen address (``global.listen_address``, the shards' ``listen``,
``--web.listen-address``); and said one way: a listen address written from its parts (``host_port``)
and why it could not be bound (``bind_reason``, ``ListenError``)."""

from __future__ import annotations

import os
import re
import socket
from typing import Any
from urllib.parse import urlsplit

from exporter.settings.reader import show, string_value

_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(?P<port>\d{1,5})")


def check_url(value: Any) -> str:
    """An ``http(s)://host[:port][/path]`` URL without credentials, query or fragment."""
    text = string_value(value)
    parts = urlsplit(text)
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not hold credentials (user:password@); use api_key or headers")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL like http://host:8000, got {show(text)}")
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError:
        raise ValueError(f"bad port in {show(text)}: a port is a number from 0 to 65535") from None
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment, got {show(text)}")
    return text.rstrip("/")


def check_target_url(value: Any) -> str:
    """A target's base URL, the one rule for ``targets[].url``, a shard job's target URLs, ``--url`` and
    ``--upstream``: the server's root, where requests add ``/v1/...``. A trailing ``/v1`` is what an
    OpenAI client's base URL has, so it is taken and left out (``http://h:8000/v1`` is
    ``http://h:8000``): one spelling per server, whichever the user copied."""
    return server_root(check_url(value))


def server_root(url: str) -> str:
    """The server's root of a target URL: a trailing ``/v1`` of its path left out (the rule of
    ``check_target_url``, which the probe client applies to a URL it is given too). A host named
    ``v1`` is no path: ``http://v1`` stays."""
    url = url.rstrip("/")
    return url.removesuffix("/v1") if urlsplit(url).path.endswith("/v1") else url


def check_listen_address(value: Any) -> str:
    text = string_value(value)
    match = _LISTEN.fullmatch(text)
    if match is None:
        raise ValueError(f"must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468), got {show(text)}")
    if int(match["port"]) > 65535:
        raise ValueError(f"port {match['port']} is out of range (0 to 65535), got {show(text)}")
    return text


def host_port(host: str, port: int) -> str:
    """``host:port`` as a listen address is written: an IPv6 host in brackets (``[::1]:8000``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_reason(exc: OSError) -> str:
    """Why a bind failed, in the system's words (``address already in use``). asyncio wraps a bind
    error in a sentence of its own that names the address again, as a Python tuple: its number says the
    same."""
    if exc.errno is not None and exc.errno > 0 and not isinstance(exc, socket.gaierror):
        return os.strerror(exc.errno).lower()
    return (exc.strerror or str(exc)).lower()  # a name that does not resolve (gaierror's own numbers)


class ListenError(OSError):
    """Cannot listen on an address: ``cannot listen on 127.0.0.1:8000: address already in use``."""

    @classmethod
    def of(cls, address: str, exc: OSError) -> ListenError:
        return cls(f"cannot listen on {address}: {bind_reason(exc)}")
