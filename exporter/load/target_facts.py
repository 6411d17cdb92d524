"""What a target says about itself before a one-shot run's load: its context length and its token counts,
and the one rule that fits a workload to that context.

``discover`` asks ``/v1/models`` for ``max_model_len`` and, unless the prompts are exact already (the
simulator's), sends eight one-token requests to calibrate our approximate prompts to the server's
tokenizer (``exporter.load.calibration``). ``fit_to_context`` keeps each request's prompt + output
within the served context; the one-shot commands, the prefill profile and capacity jobs and the daemon's
scheduled probes all fit through it, and say what the fit did (``ContextFit``) or why nothing can fit
(``cannot_fit``) in the same words.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from exporter.load.calibration import Calibration, calibrate_prompts, max_model_len
from exporter.load.workloads import Workload
from exporter.probe.client import ProbeClient
from exporter.probe.http import HttpError
from exporter.settings.target import TargetSettings
from exporter.settings.target_flags import TargetFlags

# Calibrated prompts come out within a few percent of the asked length: keep that much of the context free.
CONTEXT_MARGIN = 0.03


def context_fit_on(max_prompt_tokens: int | None) -> bool:
    """Whether requests are fitted to the served context: not when a ``max_prompt_tokens`` filter is
    given, for the user's filter wins and a 400 for an over-long request is then a finding."""
    return max_prompt_tokens is None


def usable_context(context: int, exact: bool) -> int:
    """The tokens of a served ``context`` that one request's prompt + output may fill: all of them with
    exact prompts, less ``CONTEXT_MARGIN`` with approximate or calibrated ones."""
    return context if exact else int(context * (1 - CONTEXT_MARGIN))


def fit_to_context(workload: Workload, context: int | None, exact: bool) -> Workload:
    """``workload`` keeping each request's prompt + output within ``context`` (None: not said, kept as
    it is). The two share it, so a long output leaves the rest to the prompt; the presets allow 16K
    prompts, and a server answers 400 beyond ``max_model_len``."""
    if context is None:
        return workload
    return workload.with_options(max_total_tokens=usable_context(context, exact))


def cannot_fit(workload: Workload, context: int | None, problem: ValueError) -> str:
    """Why none of ``workload``'s requests can be sent (``problem``: its sampling's refusal, which names
    the prompt + output limit): they cannot fit ``context``, the tokens the target serves. The one
    wording of a refused capacity search, from the jobs API and the command alike."""
    served = (
        "the served context" if context is None else f"the {context} tokens the target serves (max_model_len)"
    )
    return f"cannot fit {served}: its lengths are {workload.lengths.describe()}: {problem}"


@dataclass(frozen=True)
class ContextFit:
    """What fitting did to a workload, for a result: the context the target said (``context``, None:
    not said), the prompt + output each request keeps within (``limit``, None: not fitted) and the
    share of the workload's length distribution left out by it (``cut``)."""

    context: int | None
    limit: int | None
    cut: float

    @classmethod
    def of(cls, workload: Workload, context: int | None) -> ContextFit:
        """How ``workload`` (fitted or not) meets ``context``."""
        return cls(context, workload.max_total_tokens, workload.share_over_context())

    def describe(self) -> str:
        """One line, as the daemon logs a module's fit."""
        if self.context is None:
            return (
                "context: the target does not say its context (no max_model_len); requests sent as configured"
            )
        served = f"context: the target serves {self.context} tokens (max_model_len)"
        if self.limit is None:
            return f"{served}; not fitted to it: max_prompt_tokens is set, and a request over it is sent"
        if self.cut == 0:
            return f"{served}; every request fits it"
        return (
            f"{served}; cut to fit it: prompt + output <= {self.limit}, which leaves out about "
            f"{self.cut:.0%} of the workload's length distribution"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_model_len": self.context,
            "max_total_tokens": self.limit,
            "share_cut": round(self.cut, 4),
        }


@dataclass(frozen=True)
class TargetFacts:
    """What the target said about itself before the load: its context length (``max_model_len`` from
    ``/v1/models``, when it says) and how it counts our prompts (None: exact prompts, the simulator)."""

    context: int | None = None
    calibration: Calibration | None = None

    def describe(self, fit: str) -> list[str]:
        """The calibration and the context, the latter with ``fit``: what the command does to keep
        within it (its own words, so the line is true of what it sends: ``requests fit in it`` above a
        profile that leaves prompt lengths out was not)."""
        lines = [self.calibration.describe()] if self.calibration is not None else []
        if self.context is not None:
            lines.append(f"context: the server serves {self.context} tokens (max_model_len); {fit}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        calibration = self.calibration
        return {
            "max_model_len": self.context,
            "prompt_calibration": None
            if calibration is None
            else {
                "tokens_per_word": calibration.tokens_per_word,
                "overhead_tokens": calibration.overhead_tokens,
                "residual": calibration.residual,
                "requests": calibration.requests,
                "seconds": calibration.seconds,
            },
        }


async def discover_target(
    target: TargetFlags, url: str, simulated: bool
) -> tuple[TargetSettings, TargetFacts]:
    """How to reach the target at ``url``, and what it says about itself. The simulator's prompts are
    exact already; ``--no-calibrate`` keeps the server's counters to the measured load alone (the
    real-engine tests compare them with the report)."""
    settings = target.at(url)
    return settings, await discover(settings, simulated or not target.calibrate)


async def discover(settings: TargetSettings, exact_prompts: bool) -> TargetFacts:
    """Ask the target for its model, context length and prompt token counts (three 1-token requests
    calibrate our approximate prompts unless ``exact_prompts``)."""
    async with ProbeClient(settings) as client:
        await client.resolve_model()
        context = await served_context(client)
        calibration = (
            None if exact_prompts else await calibrate_prompts(client.send, settings.api, context=context)
        )
    return TargetFacts(context, calibration)


@dataclass(frozen=True)
class ContextAnswer:
    """What ``GET /v1/models`` said of the served context: ``tokens`` (None: not said, as llama.cpp's),
    or ``error``, why no answer came (the server is down or still loading, a timeout, a non-200)."""

    tokens: int | None = None
    error: str | None = None


async def ask_context(client: ProbeClient) -> ContextAnswer:
    """Ask the target for the context length it serves (``max_model_len`` of ``/v1/models``)."""
    try:
        async with asyncio.timeout(client.settings.timeouts.connect or 10.0):
            status, body = await client.get("/models")
    except TimeoutError:  # before OSError, of which it is a subclass
        return ContextAnswer(error="GET /v1/models: no answer in time")
    except (OSError, HttpError) as exc:
        return ContextAnswer(error=f"GET /v1/models: {exc}")
    if status >= 500:  # the server is there but not ready: ask again
        return ContextAnswer(error=f"GET /v1/models: HTTP {status}")
    # A 404 or 401 is an answer: this server does not say its context (asking at every probe would
    # not change that).
    return ContextAnswer(max_model_len(body) if status == 200 else None)


async def served_context(client: ProbeClient) -> int | None:
    """The context length the target serves (None: not said, or no answer)."""
    return (await ask_context(client)).tokens
