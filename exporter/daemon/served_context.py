"""The context each target serves, as the daemon learns it, and each module's probes fitted to it.

A one-shot run asks ``GET /v1/models`` for ``max_model_len`` before its load and keeps every request's
prompt + output within it (``exporter.load.target_facts``); without that, a module longer than the
server's context (a long-context module against a vLLM started with ``--max-model-len 2048``) got a
400 on every probe, forever. The daemon does the same per target, with no extra request per probe once
the target has answered: it asks before the target's first probe, again after each reload (the server
may have been restarted with another context), before every probe while the question goes unanswered
(a sidecar starts beside an engine that is still loading: the probe would be sent anyway, and back-off
spaces them), and at most once per ``CONTEXT_REASK_S`` while the target does not say (its
``/v1/models`` has no ``max_model_len``, as llama.cpp's), after it refused a request with a 400 (a
server restarted with a shorter context refuses what fitted the old one) or while a module cannot fit
(one restarted with a longer context would take it). A target that is not ``simulated`` has its
prompts calibrated to its tokenizer once per start or reload, as a one-shot run's are
(``exporter.load.calibration``). Each probe's workload is fitted by the one-shot run's own rule
(``fit_to_context``), and a module whose ``max_prompt_tokens`` is set is left as it is, as
``--max-prompt-tokens`` is. Each change is logged once (the lines are pure functions, ``context_line``
and ``fit_line``): what the target serves, and per module whether its requests are cut to fit, left as
they are, or cannot fit at all (its probes are then skipped and counted, where a one-shot run refuses
such a workload, and the module is listed in ``unfit``: /metrics shows it, and an alert reads it, since
nothing else measures it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from exporter.load.calibration import Calibration, calibrate_prompts
from exporter.load.config_workloads import fitted_workload
from exporter.load.target_facts import ContextAnswer, ask_context
from exporter.load.workloads import Workload
from exporter.probe.client import ProbeClient
from exporter.settings.model import Module, Target
from exporter.streams.request import RequestSpec
from exporter.streams.result import ProbeRefusedError, ProbeResult

LOG = logging.getLogger(__name__)
# While a target does not say its context, refused a request since, or has a module that cannot fit, ask
# again at most this often: an answer without the context (a server that never says it), a 400 that may
# have another cause, or a module too long for the context is not worth a request per probe.
CONTEXT_REASK_S = 600.0
# The skip reason of a probe none of whose requests fit (``ProbeRefusedError.reason``).
OVER_CONTEXT = "over_context"


@dataclass
class ServedContext:
    """What one target said of its context (``tokens``, None: not said), when it was asked, and the
    fit last logged for each of its modules."""

    target: str
    clock: Callable[[], float] = time.monotonic
    calibrate: bool = True  # fit our prompts to the target's tokenizer (not the simulator's exact ones)
    tokens: int | None = None
    calibration: Calibration | None = None  # how the target counts our prompts (None: not asked yet)
    calibrated_at: float = 0.0  # when; a fit that failed is tried again CONTEXT_REASK_S later
    asked_at: float | None = None  # None: to be asked before the next probe
    answered: bool = False  # the last question got an answer (else: ask before the next probe)
    recheck: bool = False  # a 400, or a module that could not fit, since the last answer: ask when due
    said: tuple[object, ...] | None = None  # the state last logged about the target (once per change)
    generation: int = 0  # bumped by a reload: an answer or a fit begun before it is dropped
    fits: dict[str, str] = field(default_factory=dict)  # module -> the line last logged about it
    unfit: set[str] = field(default_factory=set)  # modules none of whose requests fit, at their last probe
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one question at a time
    on_calibrated: Callable[[Calibration], None] | None = None  # told of each calibration's cost

    def forget(self) -> None:
        """Ask again before the next probe (a reload), and calibrate again: the server may have been
        restarted with another context or model; the values stay until the answers replace them."""
        self.asked_at = None
        self.calibration = None
        self.generation += 1

    def observe(self, results: Sequence[ProbeResult]) -> None:
        """Note a run's 400s: the context may have shrunk under the cached value."""
        if any(result.http_status == 400 for result in results):
            self.recheck = True

    async def learn(
        self, client: ProbeClient, on_send: Callable[[RequestSpec], None] | None = None
    ) -> int | None:
        """The target's context, asked when due; concurrent probes wait for the one question.
        ``on_send`` is told of each calibration request as it is sent (the target's budget counts them)."""
        async with self.lock:
            if self._due():
                generation, asked_at = self.generation, self.clock()
                answer = await ask_context(client)
                if generation != self.generation:
                    return self.tokens  # a reload came in between: the next probe asks again
                # Only now: a question cancelled on the way (a /probe past its scrape timeout) is
                # asked again, not forgotten.
                self.asked_at, self.recheck = asked_at, False
                self.answered = answer.error is None
                if self.answered:  # unanswered (the target is down): what it said before still holds
                    self.tokens = answer.tokens
                self._note_target(answer)
            if self.answered and self.calibrate and self._calibration_due():
                await self._calibrate(client, on_send)
        return self.tokens

    def _calibration_due(self) -> bool:
        """Not calibrated since the start or a reload, or the last fit failed long enough ago (its
        requests may have met an engine still warming up)."""
        if self.calibration is None:
            return True
        failed = self.calibration.tokens_per_word is None
        return failed and self.clock() - self.calibrated_at >= CONTEXT_REASK_S

    async def _calibrate(self, client: ProbeClient, on_send: Callable[[RequestSpec], None] | None) -> None:
        """Fit our approximate prompts to the target's tokenizer, as a one-shot run does before its
        load (eight one-token requests, shorter against a short context, within ``CALIBRATION_BUDGET_S``
        in all; ``exporter.load.calibration``):
        its prompts otherwise came out up to 82% longer than asked, and the 3% of the context kept free
        for approximate prompts was not enough. Once per answer after a start or reload; a failed fit
        keeps the prompts approximate, and says so at WARNING."""
        generation = self.generation

        async def send(spec: RequestSpec) -> ProbeResult:
            if on_send is not None:
                on_send(spec)
            return await client.send(spec)

        calibration = await calibrate_prompts(send, client.settings.api, context=self.tokens)
        if self.on_calibrated is not None:  # its requests were sent, whether a reload drops the fit
            self.on_calibrated(calibration)
        if generation != self.generation:
            return  # a reload came in between: its own calibration replaces this one
        said = self.calibration.finding() if self.calibration is not None else None
        self.calibration, self.calibrated_at = calibration, self.clock()
        if calibration.finding() != said:  # a retry that fails the same way is no news
            level = logging.INFO if calibration.tokens_per_word is not None else logging.WARNING
            LOG.log(level, "target %s: %s", self.target, calibration.describe())

    def sample(self, target: Target, module: Module, rng: np.random.Generator) -> list[RequestSpec]:
        """A run of ``module``'s requests fitted to the context; ``ProbeRefusedError`` when none fit."""
        workload = self.workload(target, module)
        try:
            specs = workload.sample(module.requests_per_run, rng)
        except ValueError as exc:
            if workload.max_total_tokens is None:  # not the context: a bug of ours, with its traceback
                raise
            line = f"probes of {target.name}/{module.name} skipped: they cannot fit the served context: {exc}"
            self._note_module(module.name, logging.WARNING, line)
            self.unfit.add(module.name)
            self.recheck = True  # a server restarted with a longer context would take them
            raise ProbeRefusedError(line, OVER_CONTEXT) from None
        self.unfit.discard(module.name)
        self._note_module(module.name, *fit_line(self.target, module.name, self.tokens, workload))
        return specs

    def workload(self, target: Target, module: Module) -> Workload:
        """``module``'s workload as sent to ``target``, fitted to the context the target said."""
        return fitted_workload(module, target, self.tokens, self.calibration)

    def _due(self) -> bool:
        if self.asked_at is None or not self.answered:
            return True
        unsure = self.tokens is None or self.recheck
        return unsure and self.clock() - self.asked_at >= CONTEXT_REASK_S

    def _note_target(self, answer: ContextAnswer) -> None:
        # The state, not the line: an error whose text changes (refused, then timed out) is one state.
        state = (self.answered, self.tokens)
        if state != self.said:
            self.said = state
            LOG.info("%s", context_line(self.target, answer, self.tokens))

    def _note_module(self, module: str, level: int, line: str) -> None:
        if self.fits.get(module) != line:
            self.fits[module] = line
            LOG.log(level, "%s", line)


def context_line(target: str, answer: ContextAnswer, tokens: int | None) -> str:
    """What ``target``'s ``answer`` means for its probes, ``tokens`` being the context it said last."""
    if answer.error is not None:
        kept = f"fitted to the {tokens} tokens it said before" if tokens else "sent as configured"
        return (
            f"could not ask target {target} its context ({answer.error}); its probes are {kept} "
            "until it answers, and it is asked again before each probe"
        )
    if tokens is None:
        return (
            f"target {target} does not say its context (no max_model_len from GET /v1/models); "
            "its probes are sent as configured"
        )
    return f"target {target} serves {tokens} tokens (max_model_len of GET /v1/models)"


def fit_line(target: str, module: str, tokens: int | None, workload: Workload) -> tuple[int, str]:
    """How ``module``'s requests (``workload``, as fitted) meet the ``tokens`` ``target`` serves: the log
    level and the line."""
    name = f"{target}/{module}"
    if tokens is None:
        return logging.DEBUG, f"probes of {name} are sent as configured"
    limit = workload.max_total_tokens
    if limit is None:
        return logging.WARNING, (
            f"probes of {name} are not fitted to the {tokens} tokens {target} serves: the module sets "
            "max_prompt_tokens, which wins (a request over the context is sent, and refused)"
        )
    cut = workload.share_over_context()
    if cut == 0:
        return logging.INFO, f"probes of {name}: every request fits the {tokens} tokens {target} serves"
    return logging.WARNING, (
        f"probes of {name} are cut to fit the {tokens} tokens {target} serves: prompt + output <= "
        f"{limit}, which leaves out about {cut:.0%} of the module's length distribution"
    )
