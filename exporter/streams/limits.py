"""How much of a response the client takes in before it gives up on the target: one place for the bounds.

A broken or hostile server can send headers without end, an SSE event that never ends, a body without
end or tokens past what was asked. Each is bounded here, so that it costs the request (an ``overlong``
or ``too_large`` outcome, counted as a target failure) and not the process: without the bounds, one
event of endless ``data:`` lines grew a ``bench`` process to 8.5 GB and the daemon to 5.5 GiB in 30 s
(the sidecar's limit is 1 GiB). The line and event bound is ``TargetSettings.max_line_bytes``.
"""

from __future__ import annotations

from typing import Final

# The status line and headers together. Common servers allow 8-64 KiB (nginx 4 x 8 KiB, Node 16 KiB,
# aiohttp 8 KiB a line); an LLM server's answer head is under 2 KiB, so 64 KiB is generous.
HEAD_BYTES: Final = 64 * 1024
# After the head, the bytes of a response that are not body (chunk-size lines, trailers) may be this
# many times its body and HEAD_BYTES more: 1-byte chunks cost 5 bytes each, a zero-padded size line a
# few more; the parser keeps an unfinished trailer's bytes as it does a header's.
FRAMING_PER_BODY_BYTE: Final = 32
# As many headers as Python's http.client (``_MAXHEADERS``) and Apache (``LimitRequestFields``) take.
HEADER_COUNT: Final = 100
# ``GET /v1/models``: a few hundred bytes a model; 1 MiB lists thousands of them.
MODELS_BODY_BYTES: Final = 1 << 20
# An SSE event's data lines are charged this much each beyond their bytes (a ``str`` object's header
# and its slot in the list): one event of a million one-byte lines holds ~60 MB, not 1 MB.
LINE_COST_BYTES: Final = 64


def overlong_limit(max_tokens: int) -> int:
    """The most token events a stream asked for ``max_tokens`` may carry before it is ``overlong``:
    a margin of 10%, at least 8, for servers that count a few tokens differently (a stop sequence, a
    reasoning parser's markers) without treating a stream that ignores ``max_tokens`` as fine."""
    return max_tokens + max(8, max_tokens // 10)


def bookkeeping_limit(max_tokens: int) -> int:
    """The most events without a token (role deltas, usage, empty deltas) a stream asked for
    ``max_tokens`` may carry before it is ``overlong``: a server sends at most one chunk per token it
    generates (vLLM's empty deltas while a reasoning or tool parser holds text back), plus a few of
    its own (role, finish, usage; the Responses API's ~10 per output item), so twice the token bound
    and 64 more leaves room for every server and still ends a stream of them without end."""
    return 2 * overlong_limit(max_tokens) + 64
