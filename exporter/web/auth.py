"""The bearer-token check of the routes that send load on demand (``/probe`` and the jobs API).

One function for both, so they cannot drift: the scheme is matched case-insensitively (RFC 7235: "bearer"
is as good as "Bearer"), the token is compared in constant time, and a header of odd bytes (aiohttp hands
undecodable bytes over as surrogates) fails the check, never raises, so the caller answers 401, not 500.
"""

from __future__ import annotations

import hmac

from exporter.probe.target import Secret


def bearer_matches(authorization: str | None, token: Secret) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` under the Bearer scheme."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    # Compared even when the scheme is wrong, so the time taken says nothing about which part failed.
    matches = hmac.compare_digest(_bytes(given.strip()), _bytes(token.reveal()))
    return matches and scheme.lower() == "bearer"


def _bytes(text: str) -> bytes:
    # surrogatepass: every str encodes, lone surrogates included (they then just do not match).
    return text.encode("utf-8", "surrogatepass")
