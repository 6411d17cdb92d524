"""How to reach a target, defined once and read one way from the daemon config and the flags.

``Api``, ``Secret`` and ``Timeouts`` are defined here (``exporter.streams.request`` builds a target's
settings from them); the readers take a ``Section`` shaped as a ``targets[]`` entry of the daemon
config. The flags (``--api``, ``--api-key-env``/``--api-key-file``, ``--header``, ``--extra-body``,
``--ttft-timeout``...) are put in that shape by ``exporter.settings.target_flags`` and read by the same
functions, so a bad value fails with the same message under its path or its flag.

A secret (an API key, a bearer token) is read from ``{env: NAME}`` or ``{file: PATH}``; a literal is
refused, and no message ever holds a secret's value. A header's value is a secret too when it came from
``${NAME}``, ``{env: NAME}`` or ``{file: PATH}``, or when the header's name says it carries a credential
(``credential_header``): ``read_headers`` names those headers, and every text shown of a target's
answers (errors, the log, the index page, ``/probe?debug=true``) has their values masked
(``secret_forms``), since a target or a proxy may echo the header back.
"""

from __future__ import annotations

import hmac
import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, cast

from exporter.settings.addresses import server_root
from exporter.settings.reader import Context, Section, Substituted, Unresolved, child_path, show, string_value

Api = Literal["chat", "completions", "responses"]
APIS: tuple[Api, ...] = ("chat", "completions", "responses")
TIMEOUT_KEYS: Final = ("connect", "ttft", "idle", "total")
MAX_TIMEOUT_S: Final = 86400.0  # targets[].timeouts.* and the timeout flags: a day
# engine_metrics.kind and gateway_metrics.kind: the families exporter.engine knows (its tests hold the
# two lists equal), named here so that reading a setting needs no scraper.
ENGINE_KINDS: Final = ("auto", "llamacpp", "sglang", "tgi", "vllm")
GATEWAY_KINDS: Final = ("auto", "llm-d-epp")
LITERAL_SECRET: Final = (
    "a literal key is not accepted (it would sit in the config file, its backups and diffs); "
    "write {env: NAME} or {file: PATH}"
)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE_BREAK = re.compile(r"[\r\n\x00]")  # RFC 9110: a field value holds no CR, LF or NUL
# Header names that carry a credential whatever their value's source: Authorization and its proxy twin,
# cookies, and every name with one of these words (api-key of Azure OpenAI, x-api-key,
# Ocp-Apim-Subscription-Key, X-Auth-Token, ...).
_CREDENTIAL_NAMES: Final = frozenset({"authorization", "proxy-authorization", "cookie"})
_CREDENTIAL_WORDS: Final = (
    "key",
    "token",
    "secret",
    "password",
    "auth",
    "credential",
    "session",
    "signature",
)
# A masked form shorter than this is not masked: replacing "a" in every error would garble them all,
# and no credential is that short.
MIN_SECRET_CHARS: Final = 4
MASK: Final = "********"


class Secret:
    """A secret value that never appears in repr, str, logs or pickled reports by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    @classmethod
    def from_file(cls, path: str | Path) -> Secret:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"cannot read the secret file {path}: {exc.strerror}") from exc
        if not value:
            raise ValueError(f"the secret file {path} is empty")
        return cls(value)

    def reveal(self) -> str:
        """The value, for the one place that sends it."""
        return self._value

    def matches_bearer(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries this secret under the Bearer scheme: the
        one check of every route that takes a token (``/probe``, the jobs API, the shard coordinator).
        The scheme matches in any case (RFC 7235), the token is compared in constant time, and a
        header of odd bytes (aiohttp hands undecodable bytes over as surrogates) fails, never raises,
        so the caller answers 401, not 500."""
        scheme, _, given = (authorization or "").strip().partition(" ")
        # Compared even when the scheme is wrong, so the time taken says nothing about which part failed.
        matches = hmac.compare_digest(_utf8(given.strip()), _utf8(self._value))
        return matches and scheme.lower() == "bearer"

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Worker processes need the key; pickling is the only way it travels, never printing.
        return (Secret, (self._value,))


@dataclass(frozen=True)
class Timeouts:
    """Per-request limits in seconds (None: no limit)."""

    connect: float | None = 10.0
    ttft: float | None = 60.0  # from the request write to the first token
    idle: float | None = 30.0  # longest silence between bytes once streaming (aiohttp sock_read)
    total: float | None = 600.0


def read_api(sec: Section) -> Api:
    """``api``: chat (the default), completions or responses."""
    return cast(Api, sec.choice("api", "chat", APIS))


def read_secret(ctx: Context, sec: Section, key: str, what: str) -> Secret | None:
    """``key: {env: NAME}`` or ``key: {file: PATH}`` as a ``Secret``; a literal value is a problem."""
    raw = sec.raw.get(key)
    if raw is None or isinstance(raw, Unresolved):
        return None
    if isinstance(raw, str):
        hint = " (${NAME} expands to a literal too)" if isinstance(raw, Substituted) else ""
        sec.fail(key, LITERAL_SECRET + hint)
        return None
    return _read_reference(ctx, Section.open(raw, sec.at(key), ctx.problems, ("env", "file")), what)


def _read_reference(ctx: Context, ref: Section | None, what: str) -> Secret | None:
    """The secret that ``{env: NAME}`` or ``{file: PATH}`` (the section ``ref``) points at."""
    if ref is None:
        return None
    if ref.has("env") == ref.has("file"):
        ctx.problems.add(ref.path, "give exactly one of env (a variable name) or file (a path)")
        return None
    if ref.has("env"):
        return ref.read("env", None, lambda v: _secret_from_env(ctx, v, what))
    return ref.read("file", None, lambda v: Secret.from_file(ctx.secret_file(string_value(v))))


def _secret_from_env(ctx: Context, raw: Any, what: str) -> Secret:
    name = string_value(raw)
    value = ctx.environ.get(name, "").strip()
    if not value:
        raise ValueError(f"environment variable {name} is not set or empty (it should hold {what})")
    return Secret(value)


Headers = tuple[tuple[str, str], ...]


def read_headers(ctx: Context, sec: Section) -> tuple[Headers, tuple[str, ...]]:
    """``headers: {NAME: value}``, each name a valid HTTP header name and each value a string, or a
    secret's ``{env: NAME}`` / ``{file: PATH}``; and the names of the headers whose values are secret
    (read from the environment or a file, or a credential by name: ``credential_header``)."""
    raw = sec.get("headers")
    if raw is None:
        return (), ()
    if not isinstance(raw, Mapping):
        sec.fail("headers", f"must be a mapping of header names to values, got {show(raw)}")
        return (), ()
    pairs: list[tuple[str, str]] = []
    secret: list[str] = []
    for name, given in raw.items():
        path = child_path(sec.at("headers"), str(name))
        value = _header_value(ctx, sec, path, given)
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            sec.problems.add(path, "not a valid HTTP header name")
        elif value is None:
            continue
        elif _HEADER_VALUE_BREAK.search(value):  # it would end the header: a 400 for every request
            sec.problems.add(path, "the value must not hold a line break or NUL")
        else:
            pairs.append((name, value))
            if not isinstance(given, str) or isinstance(given, Substituted) or credential_header(name):
                secret.append(name)
    return tuple(pairs), tuple(secret)


def _header_value(ctx: Context, sec: Section, path: str, given: Any) -> str | None:
    """A header's value: a string, or a secret's value read from ``{env:}`` or ``{file:}``."""
    if isinstance(given, Unresolved):
        return None
    if isinstance(given, str):
        return given
    if isinstance(given, Mapping):
        secret = _read_reference(ctx, Section.open(given, path, sec.problems, ("env", "file")), "a header")
        return secret.reveal() if secret is not None else None
    sec.problems.add(path, f"must be a string (quote it), {{env: NAME}} or {{file: PATH}}, got {show(given)}")
    return None


def credential_header(name: str) -> bool:
    """Whether a header named ``name`` carries a credential, so its value is masked wherever shown."""
    lowered = name.lower()
    return lowered in _CREDENTIAL_NAMES or any(word in lowered for word in _CREDENTIAL_WORDS)


def secret_forms(value: str) -> tuple[str, ...]:
    """The texts to mask for a secret header value, longest first: the value, and the credentials after
    its scheme (``Bearer sk-...`` is echoed as ``sk-...`` too); none shorter than ``MIN_SECRET_CHARS``."""
    forms = {value.strip(), value.strip().partition(" ")[2].strip()}
    return tuple(sorted((form for form in forms if len(form) >= MIN_SECRET_CHARS), key=len, reverse=True))


def mask_secrets(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every occurrence of each of ``secrets`` (longest first) replaced by ``MASK``, and a
    secret's start that ends it (an echoed body is cut at 200 characters, maybe inside the secret)."""
    for secret in secrets:
        text = text.replace(secret, MASK)
        cut = next(
            (n for n in range(len(secret) - 1, MIN_SECRET_CHARS - 1, -1) if text.endswith(secret[:n])), 0
        )
        if cut:
            text = text[:-cut] + MASK
    return text


def read_extra_body(sec: Section) -> tuple[tuple[str, Any], ...]:
    """``extra_body``: JSON data merged into every request body."""
    raw = sec.get("extra_body")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        sec.fail("extra_body", f"must be a mapping (merged into every request body), got {show(raw)}")
        return ()
    try:
        json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError) as exc:
        sec.fail("extra_body", f"must be JSON data: {exc}")
        return ()
    return tuple((str(k), v) for k, v in raw.items())


def read_ca_file(ctx: Context, sec: Section) -> str | None:
    """``ca_file``: a CA bundle TLS can load (PEM certificates), checked as the client will load it,
    so a file that exists but holds no certificate is refused here, not at the first connection."""
    return sec.read(
        "ca_file", None, lambda v: None if v is None else ca_bundle(ctx.existing_file(string_value(v)))
    )


def ca_bundle(path: str) -> str:
    """``path``, once TLS has loaded its certificates (a ValueError saying why it cannot)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a CA bundle TLS can load (PEM certificates): {exc}") from None
    return path


def read_timeouts(sec: Section) -> Timeouts:
    """``timeouts: {connect, ttft, idle, total}``; none of the first three given above ``total``. One
    not given whose default is above it takes the total (which would end the request first anyway):
    ``total: 10`` alone, or ``--total-timeout 10``, is a complete and valid choice."""
    default = Timeouts()
    limits = {
        key: sec.opt_duration(key, getattr(default, key), maximum=MAX_TIMEOUT_S) for key in TIMEOUT_KEYS
    }
    total = limits["total"]
    for key in ("connect", "ttft", "idle"):
        value = limits[key]
        if value is None or total is None or value <= total:
            continue
        if sec.has(key):
            sec.fail(key, f"must not exceed total ({total:g} s), got {value:g} s")
        else:
            limits[key] = total
    return Timeouts(**limits)


def _utf8(text: str) -> bytes:
    # surrogatepass: every str encodes, lone surrogates included (they then just do not match).
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class TargetSettings:
    """An OpenAI-compatible endpoint and how to talk to it."""

    base_url: str  # e.g. http://127.0.0.1:8000 (``/v1`` is added by the request functions)
    api: Api = "chat"
    model: str | None = None  # None: ask /v1/models for the first model
    api_key: Secret | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    secret_headers: tuple[str, ...] = ()  # names of the headers whose values are secret
    extra_body: tuple[tuple[str, Any], ...] = ()  # merged into every request body
    timeouts: Timeouts = field(default_factory=Timeouts)
    verify_tls: bool = True
    ca_file: str | None = None
    ignore_eos: bool = True  # ask for exactly max_tokens where the server supports it
    send_min_tokens: bool = True  # also send min_tokens = max_tokens (vLLM honours it; llama.cpp ignores)
    request_token_ids: bool = True  # ask for return_token_ids (vLLM); harmless where unknown
    request_continuous_usage: bool = True  # stream_options.continuous_usage_stats
    tokenizer_file: str | None = None  # a tokenizer.json for counting chunk tokens locally
    max_line_bytes: int = 4 * 1024 * 1024  # longest SSE line accepted (vLLM's first chunk lists prompt ids)

    def __post_init__(self) -> None:
        # The one rule for a target's URL (``addresses.server_root``: a trailing ``/v1`` left out), for a
        # URL given here directly too, so every client adds ``/v1`` to the server's root alike.
        object.__setattr__(self, "base_url", server_root(self.base_url))

    def secret_texts(self) -> tuple[str, ...]:
        """Every text to mask in what is shown of this target's answers, longest first: the API key
        and the values of the secret headers (a target or proxy may echo them back)."""
        texts = [self.api_key.reveal()] if self.api_key is not None else []
        secret = {name.lower() for name in self.secret_headers}
        texts += [
            form for name, value in self.headers if name.lower() in secret for form in secret_forms(value)
        ]
        return tuple(sorted(set(texts), key=len, reverse=True))
