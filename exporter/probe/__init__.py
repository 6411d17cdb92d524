"""The measuring half: a streaming client that times every token of an OpenAI-compatible endpoint.

Network I/O only stamps times (``time.perf_counter``, the monotonic clock shared by every process on
the machine); what those stamps mean (TTFT, intervals, fluidity) is computed by pure functions on the
recorded ``ProbeResult``. Target failures never raise: every request ends as a result with an
``Outcome`` and whatever partial timings it got.
"""
