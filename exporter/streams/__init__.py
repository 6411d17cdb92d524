"""An OpenAI-compatible stream, whoever reads it: the probe client from its own sockets, the traffic
observer from the body chunks Envoy sends it.

- ``request``: what a request asks (``RequestSpec``, its API, the probe's marking header).
- ``openai``: the wire formats of ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/responses``.
- ``sse``: Server-Sent Events decoding; ``chunk_shapes``: the fast readers of the common chunk shapes.
- ``decoder``: what a stream's events mean for its record (``StreamState``); ``tokens``: token counting.
- ``result``: the record of one request (``ProbeResult``) and the pure functions on it.
- ``bounds``: the limits on every byte a target sends.
- ``saturation``: whether a reader was too busy for its own stamps (the rule, the loop's lag monitor).

Everything here is pure or stamps nothing itself: the readers stamp, this package decodes.
Layer: below ``probe`` and ``traffic`` (the two readers), above ``settings``.
"""
