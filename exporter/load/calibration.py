"""Fit our approximate prompts to a server's own tokenizer, and read how long a context it serves.

Against a server whose tokenizer we do not have, ``ApproxPromptBuilder`` writes one common English
word per intended token. Real tokenizers disagree (the simulator's counts a word of four letters or more
as two tokens: its prompts came out 82% longer than asked, and 12% of requests went over its context),
and a chat template adds tokens of its own. So before the load, ``calibrate_prompts`` sends one-token
requests with prompts of ``PROBE_TOKENS`` lengths (``SHORT_REPEATS`` short ones, one long), reads the
prompt tokens the server reports in its usage, fits ``reported = overhead + tokens_per_word * words``
through the short ones' mean and the long one, and checks the fit on a third length: the residual is
reported beside the figures. The overhead is read off short prompts, several of them: one prompt's
count varies by its words' mix (4-8 tokens on the simulator, at any length), and a fit through one
prompt of 256 words and one of 1024 read an overhead of 4.3 tokens on average over 57 salts (up to 22)
where the simulator's completions have none, so that prompts of a few tokens came out empty and the
``lmsys`` preset's lengths 17% off at the median (measured: 6% with the true overhead); six of 8 words
read 0.3 on average (at most 2.1). A server that reports no usage, or
fails the fitting requests, leaves the builder as it was and says which (a 501 is not a missing count).

Its cost is bounded and said: the requests go out one after another, and all of them together have
``CALIBRATION_BUDGET_S``; the one in flight when it runs out is cut, the rest are not sent, and the fit
is not made (against a server that stalled 20 s a request, the calibration took most of two minutes
before a 2-request run; in the daemon the first probe waited on it). ``Calibration`` keeps how many
requests it sent and how long they took, and ``describe`` says both.

``context_length`` reads ``max_model_len`` from ``GET /v1/models`` where the server gives it (vLLM and
the simulator do), so that workloads and prefill ladders keep ``prompt + output`` within it instead of
sending requests the server must refuse.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from exporter.load.prompts import ApproxPromptBuilder, first_token_spec
from exporter.streams.request import Api, RequestSpec
from exporter.streams.result import Outcome, ProbeResult

PROBE_TOKENS = (8, 1024)  # the two lengths of the fit (intended, in words)
SHORT_REPEATS = 6  # prompts of the short length, whose mean the fit goes through
CHECK_TOKENS = 512  # the length the fit is checked on
# Against a short context every length is shrunk so the longest is at most this share of it: a
# 1024-word prompt drew a 400 from a 512-token server, and the fit was lost (a word can be 2 tokens).
CONTEXT_SHARE = 0.4
CALIBRATION_KEY = 7_777_000  # prompt keys of the calibration requests (unique texts: no prompt cache)
CALIBRATION_REQUESTS = 1 + SHORT_REPEATS + 1  # the long fitting prompt, the short ones, the check
# What the requests may take in all: against the simulator or a GPU engine they take well under a
# second; a target slower than this fails visibly (the fit is not made, and the line says why) instead
# of holding back the load, or a daemon's first probe, by minutes.
CALIBRATION_BUDGET_S = 30.0

Send = Callable[[RequestSpec], Awaitable[ProbeResult]]


@dataclass(frozen=True)
class Calibration:
    """How the server counts our prompts, and the builder that asks for the right number of words."""

    builder: ApproxPromptBuilder
    tokens_per_word: float | None  # None: nothing was fitted (``unfitted`` says why)
    overhead_tokens: float
    residual: float | None  # |reported - intended| / intended on the check length, after the fit
    unfitted: str = "the server reported no prompt tokens"  # why nothing was fitted, when it was not
    check_tokens: int = CHECK_TOKENS  # the length the fit was checked on
    requests: int = 0  # the calibration requests sent (a cut one included)
    seconds: float = 0.0  # how long they took in all

    def describe(self) -> str:
        """What the fit found, or why there is none, and what it cost."""
        return f"prompt calibration: {self.finding()} ({self.requests} requests, {self.seconds:.1f} s)"

    def finding(self) -> str:
        """What the fit found, or why there is none (the same on a retry that fails the same way)."""
        if self.tokens_per_word is None:
            return f"{self.unfitted}; prompt lengths are approximate"
        per_word, overhead = self.tokens_per_word, self.overhead_tokens
        fitted = f"the server counts {per_word:.3f} tokens per prompt word + {overhead:.0f}; "
        if self.residual is None:
            return (
                fitted
                + f"the {self.check_tokens}-token check request failed, so the residual error is unknown"
            )
        return fitted + (
            f"residual error after fitting {self.residual:.1%} on a {self.check_tokens}-token check (other lengths "
            "can be a few percent off: 3 % of the context is kept free for it)"
        )


class _Budget:
    """The calibration's requests, sent one at a time within ``seconds`` in all."""

    def __init__(self, send: Send, api: Api, seconds: float, clock: Callable[[], float]) -> None:
        self.send, self.api, self.seconds, self.clock = send, api, seconds, clock
        self.started = clock()
        self.sent = 0

    async def ask(self, builder: ApproxPromptBuilder, tokens: int, key: int) -> ProbeResult | None:
        """The server's answer to one calibration request; None when the budget ran out before it
        ended (the request is cut) or before it could be sent."""
        remaining = self.seconds - self.elapsed()
        if remaining <= 0:
            return None
        self.sent += 1
        try:
            async with asyncio.timeout(remaining):
                return await self.send(first_token_spec(builder, self.api, tokens, key, f"calibration-{key}"))
        except TimeoutError:
            return None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def spent(self) -> str:
        """Why a calibration ended unfitted on its budget."""
        return (
            f"the calibration's {self.seconds:g} s ran out after {self.sent} of {CALIBRATION_REQUESTS} "
            "requests (the target answers slowly; the rest were not sent)"
        )

    def done(self, calibration: Calibration) -> Calibration:
        """``calibration`` with what it cost."""
        return replace(calibration, requests=self.sent, seconds=self.elapsed())


def _answered(result: ProbeResult) -> bool:
    # A token without text (``no_tokens``: a piece of a multi-byte character) still comes with the
    # server's count of the prompt, which is all calibration needs.
    return result.ok or result.outcome is Outcome.NO_TOKENS


def _reported(result: ProbeResult) -> int | None:
    return result.prompt_tokens_reported if _answered(result) else None


def _why_unfitted(results: Sequence[ProbeResult]) -> str:
    """Why the fitting requests gave no fit: they failed (with how), gave no count, or counts that do
    not grow with the prompt."""
    failed = [r for r in results if not _answered(r)]
    if failed:
        how = ", ".join(sorted({_failure(r) for r in failed}))
        return f"a fitting request failed ({how}; the rest and the check were not sent)"
    if any(r.prompt_tokens_reported is None for r in results):
        return "the server reported no prompt tokens"
    return "the server's prompt token counts did not grow with the prompt"


def _failure(result: ProbeResult) -> str:
    status = f" {result.http_status}" if result.http_status is not None else ""
    return f"{result.outcome.value}{status}"


def calibration_lengths(context: int | None) -> tuple[int, int, int]:
    """The two fitting lengths and the check length, in words: ``PROBE_TOKENS`` and ``CHECK_TOKENS``,
    shrunk to a short ``context`` (the longest at most ``CONTEXT_SHARE`` of it)."""
    (low, high), check = PROBE_TOKENS, CHECK_TOKENS
    if context is None or high <= context * CONTEXT_SHARE:
        return low, high, check
    scale = context * CONTEXT_SHARE / high
    return max(int(low * scale), 4), max(int(high * scale), 16), max(int(check * scale), 8)


async def calibrate_prompts(
    send: Send,
    api: Api,
    salt: int = 0,
    context: int | None = None,
    *,
    budget_s: float = CALIBRATION_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> Calibration:
    """The fitting requests and one check, each of one output token, their lengths within ``context``
    (the served context, when known), all within ``budget_s``; see the module docstring."""
    budget = _Budget(send, api, budget_s, clock)
    return budget.done(await _calibrate(budget, salt, context))


async def _calibrate(budget: _Budget, salt: int, context: int | None) -> Calibration:
    plain = ApproxPromptBuilder()
    low, high, check = calibration_lengths(context)
    key = CALIBRATION_KEY + salt
    fitting: list[ProbeResult] = []
    counts: list[int] = []  # the long prompt's, then the short ones'
    for length, at in [(high, key + 1), *((low, key + 3 + i) for i in range(SHORT_REPEATS))]:
        answer = await budget.ask(plain, length, at)
        if answer is None:
            return Calibration(plain, None, 0.0, None, budget.spent(), check)
        fitting.append(answer)
        count = _reported(answer)
        if count is None:  # no fit without it: spare a failing server the rest
            return Calibration(plain, None, 0.0, None, _why_unfitted(fitting), check)
        counts.append(count)
    if max(counts[1:]) >= counts[0]:
        return Calibration(plain, None, 0.0, None, _why_unfitted(fitting), check)
    reported_low, reported_high = sum(counts[1:]) / SHORT_REPEATS, counts[0]
    per_word = (reported_high - reported_low) / (high - low)
    overhead = max(reported_low - per_word * low, 0.0)
    builder = ApproxPromptBuilder(tokens_per_word=per_word, overhead_tokens=overhead)
    answer = await budget.ask(builder, check, key + 2)
    checked = _reported(answer) if answer is not None else None
    residual = abs(checked - check) / check if checked is not None else None
    return Calibration(builder, per_word, overhead, residual, check_tokens=check)


def max_model_len(models_body: bytes) -> int | None:
    """``max_model_len`` of the first model a ``GET /v1/models`` answer lists, when it says."""
    try:
        value = json.loads(models_body)["data"][0].get("max_model_len")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
