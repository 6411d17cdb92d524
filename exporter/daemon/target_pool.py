"""The daemon's targets: one probe client, budget, health and served context per configured target, and
probes run through them within the budget, fitted to the context (``daemon.served_context``).

A reload replaces a target's state only when its settings changed; a replaced client is closed once
the probes still running on it have ended (``close_later``), and the target's health (its last error,
its back-off) carries over, because the operator still needs it.

A job holds the client it started with for its whole life (``lease``): a reload that changes or
removes the target takes effect for the next job, and the old client stays open until the leases on
it end. A search measured half on old settings and half on new ones would measure neither, and a job
whose target a reload removed once failed as a bug (``KeyError``, or a client closed under it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from exporter.daemon.budget import BudgetTracker
from exporter.daemon.served_context import ServedContext
from exporter.daemon.target_health import TargetHealth
from exporter.load.calibration import Calibration
from exporter.load.plan import LoadPlan
from exporter.load.runner import run_plan
from exporter.load.sessions import planned_tokens, session_turns
from exporter.probe.client import ProbeClient
from exporter.settings import Config
from exporter.settings.model import Module, Target
from exporter.streams.request import RequestSpec
from exporter.streams.result import ProbeRefusedError, ProbeResult, ProbeRun

IDLE_POLL_S = 0.05  # how often a starting job checks whether the target's probes have ended
REPLACED_CLIENT_GRACE_S = 600.0  # a replaced client closes when its probes end, or after this


@dataclass
class TargetState:
    """One target as the daemon runs it."""

    config: Target
    client: ProbeClient
    budget: BudgetTracker
    health: TargetHealth
    context: ServedContext
    busy: set[str] = field(default_factory=set)  # probes in flight, "module:on-demand|scheduled"
    leases: int = 0  # jobs running on this client (``TargetPool.lease``)


class TargetPool:
    """Every configured target's state; ``probe`` runs one probe of a module within its budget."""

    def __init__(
        self,
        wall_clock: Callable[[], float] = time.time,
        on_calibrated: Callable[[str, Calibration], None] | None = None,
    ) -> None:
        self._wall_clock = wall_clock
        self._on_calibrated = on_calibrated  # (target, what its calibration cost)
        self._states: dict[str, TargetState] = {}
        self.closing = False  # a shutdown began: the probes it cuts are not the targets' failures

    def _calibrated_hook(self, target: str) -> Callable[[Calibration], None] | None:
        on_calibrated = self._on_calibrated
        if on_calibrated is None:
            return None
        return lambda calibration: on_calibrated(target, calibration)

    @property
    def states(self) -> Mapping[str, TargetState]:
        return self._states

    @contextlib.asynccontextmanager
    async def lease(self, target: str) -> AsyncIterator[ProbeClient]:
        """The target's client, kept open for the block even if a reload replaces or removes it."""
        state = self._states[target]
        state.leases += 1
        try:
            yield state.client
        finally:
            state.leases -= 1

    async def sync(self, config: Config) -> list[str]:
        """Open, keep or replace each configured target's client; returns the names removed."""
        names = {target.name for target in config.targets}
        removed = [name for name in self._states if name not in names]
        for name in removed:
            gone = self._states.pop(name)
            if gone.leases or gone.busy:  # a job or a probe still uses it
                asyncio.get_running_loop().create_task(close_later(gone))
            else:
                await gone.client.__aexit__(None, None, None)
        for target in config.targets:
            state = self._states.get(target.name)
            if state is not None:
                state.health.retain(target.modules)
            if state is not None and state.config == target:
                state.context.forget()  # the server may have been restarted with another context
                continue
            client = await ProbeClient(target.client).__aenter__()
            if state is not None:  # new settings: probes and jobs in flight keep the old client
                asyncio.get_running_loop().create_task(close_later(state))
            health = state.health if state is not None else TargetHealth(target.name, self._wall_clock)
            budget = BudgetTracker(target.budget, time.monotonic)
            self._states[target.name] = TargetState(
                target,
                client,
                budget,
                health,
                ServedContext(
                    target.name,
                    calibrate=target.calibrates_prompts,
                    on_calibrated=self._calibrated_hook(target.name),
                ),
            )
        return removed

    async def probe(
        self, target: Target, module: Module, rng: np.random.Generator, *, on_demand: bool
    ) -> ProbeRun:
        """One probe of ``module`` against ``target``, its requests fitted to the context the target
        serves; refused (``ProbeRefusedError``) when one of the same kind is running, none of its
        requests can fit that context, or the target's budget says no."""
        state = self._states[target.name]
        key = f"{module.name}:{'on-demand' if on_demand else 'scheduled'}"
        if key in state.busy:
            raise ProbeRefusedError(f"a probe of {target.name}/{module.name} is already running", "busy")
        # Busy from here: asking the context and calibrating send requests too, which a second probe of
        # the same kind, or a job waiting for the target to be idle, must not overlap.
        state.busy.add(key)
        try:
            _refuse_over_budget(state, target, 0, 0)  # a target backing off is not even asked
            # Calibration's requests are load on the target like the probe's: charged as they are sent.
            await state.context.learn(state.client, _Charges(state.budget).sent)
            specs = self._sample(state, target, module, rng)
            # A session counts every turn, each re-sending the conversation so far.
            _refuse_over_budget(state, target, session_turns(specs), sum(planned_tokens(s) for s in specs))
            started = time.perf_counter()
            charged = _Charges(state.budget)
            try:
                results = await _send(state.client, probe_plan(module, specs, rng), charged.sent)
            except asyncio.CancelledError:
                # Cut by its deadline (an on-demand probe past the scrape timeout): what it sent is
                # charged already, and a run that cannot finish is a failed run; one a shutdown cut is not
                # the target's failure.
                if not self.closing:
                    backoff_s = state.budget.record_cut(module.name)
                    state.health.observe_cut(module.name, state.budget.failed_runs, backoff_s)
                raise
        finally:
            state.busy.discard(key)
        state.context.observe(results)
        backoff_s = state.budget.record(results, module=module.name, charged=charged.total)
        state.health.observe(module.name, results, state.budget.failed_runs, backoff_s)
        state.health.retain(target.modules)  # an on-demand probe of another module cannot pin its state
        return ProbeRun(results, time.perf_counter() - started)

    @staticmethod
    def _sample(
        state: TargetState, target: Target, module: Module, rng: np.random.Generator
    ) -> list[RequestSpec]:
        try:
            return state.context.sample(target, module, rng)
        except ProbeRefusedError:
            # Skipped, not failed: FluidityProbeOverContext says so; an earlier failure of the module
            # (the 400s that preceded the fit) must not hold the target failing for good.
            state.health.retain(m for m in target.modules if m != module.name)
            raise

    @property
    def probing(self) -> bool:
        """Whether any target has a probe in flight."""
        return any(state.busy for state in self._states.values())

    async def wait_none_probing(self, limit_s: float) -> None:
        """Until no target has a probe in flight, or ``limit_s`` has passed."""
        deadline = time.monotonic() + limit_s
        while self.probing and time.monotonic() < deadline:
            await asyncio.sleep(IDLE_POLL_S)

    async def wait_idle(self, target: str) -> None:
        """Until the target's probes in flight have ended (their own timeouts bound the wait)."""
        state = self._states.get(target)
        while state is not None and state.busy:
            await asyncio.sleep(IDLE_POLL_S)

    async def close(self) -> None:
        """Close every client."""
        for state in self._states.values():
            await state.client.__aexit__(None, None, None)
        self._states.clear()


def _refuse_over_budget(state: TargetState, target: Target, requests: int, tokens: int) -> None:
    reason = state.budget.skip_reason(requests, tokens)
    if reason is not None:
        detail = state.health.describe() if reason == "backing_off" else "see targets[].budget"
        raise ProbeRefusedError(f"target {target.name}: {reason.replace('_', ' ')}; {detail}", reason)


class _Charges:
    """Charges each request to the budget as it is sent, and keeps the sum for the run to settle."""

    def __init__(self, budget: BudgetTracker) -> None:
        self._budget = budget
        self.total = (0, 0)  # (requests, tokens) charged so far

    def sent(self, spec: RequestSpec) -> None:
        requests, tokens = session_turns([spec]), planned_tokens(spec)
        self._budget.charge(requests, tokens)
        self.total = (self.total[0] + requests, self.total[1] + tokens)


def probe_plan(module: Module, specs: Sequence[RequestSpec], rng: np.random.Generator) -> LoadPlan:
    """A probe of ``module`` as a load plan: open loop at its arrival, else closed at its concurrency."""
    if module.arrival is not None:
        return LoadPlan(specs, module.arrival.offsets(len(specs), rng))
    return LoadPlan(specs, concurrency=module.concurrency or 1)


async def _send(
    client: ProbeClient, plan: LoadPlan, on_send: Callable[[RequestSpec], None]
) -> list[ProbeResult]:
    def send(spec: RequestSpec, at: float | None) -> Awaitable[ProbeResult]:
        on_send(spec)
        return client.send(spec, scheduled_at=at)

    return (await run_plan(send, plan)).results


async def close_later(state: TargetState, grace_s: float = REPLACED_CLIENT_GRACE_S) -> None:
    """Close a replaced or removed client once the jobs leasing it have ended (their own limits bound
    them) and its in-flight probes are done (or after a long grace)."""
    deadline = time.monotonic() + grace_s
    while state.leases or (state.busy and time.monotonic() < deadline):
        await asyncio.sleep(1.0)
    await state.client.__aexit__(None, None, None)
