"""The iteration-level scheduler: continuous batching over a paged KV cache, on an injected clock.

The engine never reads a clock and never sleeps. ``schedule(now)`` picks the next iteration's batch and
returns it with its duration from the cost model; ``complete(batch)`` applies the iteration and returns
the tokens it produced. The real-time runner (``realtime.py``) calls the two on the event loop;
``run_virtual`` calls them on a virtual timeline, which is how the tests check the model without waiting.

Scheduling follows vLLM:

* chunked prefill on (vLLM V1, Sarathi-Serve): every running decode gets its token first, then
  unfinished prefills and newly admitted requests share what is left of ``max_num_batched_tokens``, so a
  long prompt is split into chunks and decodes keep flowing;
* chunked prefill off (vLLM V0's default, the behaviour the Etalon paper measures): when a waiting request
  can be admitted, the step is a prefill-only step that runs whole prompts and stalls every running
  decode for its full duration;
* admission needs KV blocks for the whole prompt; a decode that needs a new block when none is free
  preempts the most recently admitted request (recompute: its KV is dropped and it re-queues at the
  front, later re-prefilling prompt + generated tokens);
* speculative decoding: each decode verifies ``spec_k`` draft tokens and emits 1 + accepted of them in
  one chunk, acceptance drawn per request from a seeded generator;
* prefix caching (``prefix_caching``, on by default as in vLLM V1): a request that lists its prompt's
  token ids starts its prefill after the leading blocks found in the prefix cache (``prefix_cache.py``),
  and counts the prompt tokens looked up and found (``vllm:prefix_cache_queries`` and ``_hits``).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from exporter.sim import tokenizer
from exporter.sim.costmodel import CostModel, StepShape, step_time
from exporter.sim.prefix_cache import PrefixCache, block_hashes


@dataclass(frozen=True)
class EngineParams:
    """Capacity and scheduling knobs, named as in vLLM where vLLM has them."""

    max_num_seqs: int
    max_num_batched_tokens: int
    num_kv_blocks: int
    block_size: int
    max_model_len: int
    chunked_prefill: bool
    max_waiting: int = 1024
    spec_k: int = 0
    spec_acceptance: float = 0.0
    prefix_caching: bool = True
    prefix_cache_blocks: int | None = None  # None: as many as num_kv_blocks


class Phase(Enum):
    """Where a request is in its life."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class SimRequest:
    """One request as the engine tracks it."""

    prompt_len: int
    output_limit: int
    finish_reason: str
    arrival: float
    seed: int = 0
    phase: Phase = Phase.WAITING
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    decoding: bool = False
    first_scheduled: float | None = None
    preemptions: int = 0
    rng: random.Random = field(default_factory=random.Random)
    prompt_ids: tuple[int, ...] = ()  # the prompt's token ids, for the prefix cache (empty: no lookup)
    cached_tokens: int = 0  # prompt tokens the prefix cache served at the first admission
    looked_up: bool = False  # the prefix cache was consulted since the last (re)queueing

    @property
    def prefill_target(self) -> int:
        """Tokens whose KV must exist before the next token can be sampled (recompute includes outputs)."""
        return self.prompt_len + self.generated

    @property
    def in_prefill(self) -> bool:
        """Whether the request still has prompt (or recompute) work before it can decode."""
        return not self.decoding

    def start_running(self, now: float) -> None:
        """Admitted into the running batch at ``now`` (its first admission is its queueing's end)."""
        self.phase = Phase.RUNNING
        if self.first_scheduled is None:
            self.first_scheduled = now

    def requeue(self) -> None:
        """Preempted by recompute: its KV is gone, so its prefill (prompt + outputs) starts over."""
        self.computed = 0
        self.decoding = False
        self.looked_up = False
        self.phase = Phase.WAITING
        self.preemptions += 1


@dataclass(frozen=True)
class Emission:
    """Tokens one request got from one iteration."""

    request: SimRequest
    tokens: int
    first: bool
    finished: bool


@dataclass
class Batch:
    """One iteration's work and its modelled duration."""

    start: float
    duration: float
    decodes: list[tuple[SimRequest, int]]  # (request, tokens it will emit)
    prefills: list[tuple[SimRequest, int]]  # (request, chunk length)

    @property
    def end(self) -> float:
        """When the iteration's tokens are due."""
        return self.start + self.duration


class KvBlocks:
    """The paged KV cache's block pool: how many blocks are free, and each request's share of it."""

    def __init__(self, total: int, block_size: int) -> None:
        self.total = total
        self.block_size = block_size
        self.free = total

    def grow(self, request: SimRequest, tokens: int) -> bool:
        """Give ``request`` the blocks ``tokens`` need; False (and nothing taken) when too few are free."""
        need = math.ceil(tokens / self.block_size) - request.blocks
        if need > self.free:
            return False
        if need > 0:
            self.free -= need
            request.blocks += need
        return True

    def release(self, request: SimRequest) -> None:
        """Return every block of ``request`` to the pool."""
        self.free += request.blocks
        request.blocks = 0


class CachedPrefixes:
    """The engine's use of its prefix cache (``prefix_cache.py``): where a (re)queued request's prefill
    starts, what a prompt's and a finished request's tokens leave in the cache, and the prompt tokens
    looked up and found (``vllm:prefix_cache_queries`` and ``_hits``)."""

    def __init__(self, capacity: int | None, block_size: int) -> None:
        self.cache = PrefixCache(capacity) if capacity is not None else None  # None: caching off
        self.block_size = block_size
        self.queries = 0  # prompt tokens looked up in the prefix cache
        self.hits = 0  # of those, tokens found

    def look_up(self, request: SimRequest) -> None:
        """Start a (re)queued request's prefill after its cached prefix."""
        if self.cache is None or request.looked_up or not request.prompt_ids or request.computed:
            return
        request.looked_up = True
        hits = self.cache.match(block_hashes(request.prompt_ids, self.block_size))
        cached = min(hits * self.block_size, request.prefill_target - 1)
        request.computed = cached
        if request.generated == 0 and request.preemptions == 0:
            request.cached_tokens = cached
        self.queries += request.prompt_len
        self.hits += cached

    def remember(self, request: SimRequest, with_output: bool) -> None:
        """Cache the prompt's blocks (and the output's, once the request is done)."""
        if self.cache is None or not request.prompt_ids:
            return
        ids = list(request.prompt_ids)
        if with_output:
            ids += [tokenizer.generated_token_id(request.seed, i) for i in range(request.generated)]
        self.cache.insert(block_hashes(ids, self.block_size))


def spec_tokens(request: SimRequest, spec_k: int, acceptance: float) -> int:
    """Tokens one decode emits with speculative decoding: 1 + the drafts accepted (each with
    probability ``acceptance``, drawn from the request's seeded generator until one is rejected),
    never past the request's output limit."""
    accepted = 0
    while accepted < spec_k and request.rng.random() < acceptance:
        accepted += 1
    return min(1 + accepted, request.output_limit - request.generated)


def step_shape(
    decodes: list[tuple[SimRequest, int]], prefills: list[tuple[SimRequest, int]], spec_k: int
) -> StepShape:
    """What the cost model charges an iteration of these decodes and prefill chunks for."""
    return StepShape(
        decode_seqs=len(decodes),
        decode_context_tokens=sum(r.prompt_len + r.generated for r, _ in decodes),
        spec_tokens=spec_k * len(decodes),
        prefill_chunks=tuple((r.computed, chunk) for r, chunk in prefills),
    )


class Engine:
    """Waiting queue, running set and KV-block accounting; see the module docstring for the policy.

    Over 150 lines, kept whole: ``schedule`` and ``complete`` are one state machine over the waiting
    queue, the running list and the block pool, and each of its steps reads and changes all three (a
    decode that finds no free block preempts the newest running request to the front of the queue).
    Split further, every part would take all three, and the per-step path (``bench/sim_bench.py``)
    would pay a call for each. What has state or math of its own is apart: the block pool
    (``KvBlocks``), prefix caching (``CachedPrefixes``), a request's own transitions (``SimRequest``)
    and a step's arithmetic (``spec_tokens``, ``step_shape``).
    """

    def __init__(self, params: EngineParams, cost: CostModel) -> None:
        self.params = params
        self.cost = cost
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.kv = KvBlocks(params.num_kv_blocks, params.block_size)
        self.num_preemptions = 0
        self.prompt_tokens = 0
        blocks = params.prefix_cache_blocks or params.num_kv_blocks
        self.prefixes = CachedPrefixes(blocks if params.prefix_caching else None, params.block_size)

    # -- queue -----------------------------------------------------------------------------------

    def submit(self, request: SimRequest) -> bool:
        """Queue ``request``; False when the waiting queue is full (the server answers 429)."""
        if len(self.waiting) >= self.params.max_waiting:
            return False
        request.rng.seed(request.seed)
        self.waiting.append(request)
        return True

    def abort(self, request: SimRequest) -> None:
        """Drop a request whose client went away, freeing its KV blocks."""
        if request.phase is Phase.WAITING and request in self.waiting:
            self.waiting.remove(request)
        elif request.phase is Phase.RUNNING:
            self.running.remove(request)
            self.kv.release(request)
        request.phase = Phase.ABORTED

    @property
    def idle(self) -> bool:
        """Nothing queued or running."""
        return not self.waiting and not self.running

    @property
    def free_blocks(self) -> int:
        """KV blocks no request holds."""
        return self.kv.free

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use, 0-1, like ``vllm:kv_cache_usage_perc``."""
        return 1.0 - self.kv.free / self.kv.total

    @property
    def cache_queries(self) -> int:
        """Prompt tokens looked up in the prefix cache (none without prefix caching)."""
        return self.prefixes.queries

    @property
    def cache_hits(self) -> int:
        """Of the prompt tokens looked up, those found in the prefix cache."""
        return self.prefixes.hits

    def _preempt_last(self) -> SimRequest:
        victim = self.running.pop()
        self.kv.release(victim)
        victim.requeue()
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    # -- scheduling ------------------------------------------------------------------------------

    def _schedule_decodes(self, budget: int) -> tuple[list[tuple[SimRequest, int]], int]:
        decodes: list[tuple[SimRequest, int]] = []
        spec_k, acceptance = self.params.spec_k, self.params.spec_acceptance
        index = 0
        while index < len(self.running):
            request = self.running[index]
            if request.in_prefill:
                index += 1
                continue
            need = 1 + spec_k
            if need > budget:
                break
            while not self.kv.grow(request, request.prompt_len + request.generated + need):
                if self._preempt_last() is request:
                    return decodes, budget
            decodes.append((request, spec_tokens(request, spec_k, acceptance)))
            budget -= need
            index += 1
        return decodes, budget

    def _continue_prefills(self, budget: int) -> tuple[list[tuple[SimRequest, int]], int]:
        prefills: list[tuple[SimRequest, int]] = []
        for request in self.running:
            if request.in_prefill and budget > 0:
                chunk = min(request.prefill_target - request.computed, budget)
                prefills.append((request, chunk))
                budget -= chunk
        return prefills, budget

    def _admit(self, now: float, budget: int, whole_only: bool) -> list[tuple[SimRequest, int]]:
        admitted: list[tuple[SimRequest, int]] = []
        while self.waiting and budget > 0 and len(self.running) < self.params.max_num_seqs:
            request = self.waiting[0]
            self.prefixes.look_up(request)
            remaining = request.prefill_target - request.computed
            if whole_only and remaining > budget:
                break
            if not self.kv.grow(request, request.prefill_target + 1):
                break  # head-of-line blocking on KV, as vLLM's FCFS queue does
            self.waiting.popleft()
            request.start_running(now)
            self.running.append(request)
            chunk = min(remaining, budget)
            admitted.append((request, chunk))
            budget -= chunk
        return admitted

    def schedule(self, now: float) -> Batch | None:
        """The next iteration starting at ``now``, or None when there is nothing to run."""
        budget = self.params.max_num_batched_tokens
        if self.params.chunked_prefill:
            decodes, budget = self._schedule_decodes(budget)
            prefills, budget = self._continue_prefills(budget)
            prefills += self._admit(now, budget, whole_only=False)
        else:
            # Without chunking vLLM requires max_num_batched_tokens >= max_model_len, so that any
            # prompt fits one step; a smaller configured budget would leave long prompts queued forever.
            decodes = []
            prefills = self._admit(now, max(budget, self.params.max_model_len), whole_only=True)
            if not prefills:
                decodes, _ = self._schedule_decodes(budget)
        if not decodes and not prefills:
            return None
        shape = step_shape(decodes, prefills, self.params.spec_k)
        return Batch(now, step_time(self.cost, shape), decodes, prefills)

    # -- applying an iteration -------------------------------------------------------------------

    def complete(self, batch: Batch) -> list[Emission]:
        """Apply ``batch``: advance prefills, append tokens, retire finished requests."""
        emissions: list[Emission] = []
        for request, tokens in batch.decodes:
            if request.phase is Phase.RUNNING:
                request.computed += tokens
                emissions.append(self._emit(request, tokens))
        for request, chunk in batch.prefills:
            if request.phase is not Phase.RUNNING:
                continue
            request.computed += chunk
            if request.computed >= request.prefill_target:
                request.decoding = True
                if request.generated == 0:
                    self.prompt_tokens += request.prompt_len
                    self.prefixes.remember(request, with_output=False)
                emissions.append(self._emit(request, 1))
        return emissions

    def _emit(self, request: SimRequest, tokens: int) -> Emission:
        first = request.generated == 0
        request.generated += tokens
        finished = request.generated >= request.output_limit
        if finished:
            request.phase = Phase.FINISHED
            self.running.remove(request)
            self.kv.release(request)
            self.prefixes.remember(request, with_output=True)
        return Emission(request, tokens, first, finished)


Arrival = tuple[float, SimRequest]


def run_virtual(
    engine: Engine,
    arrivals: Iterable[Arrival],
    on_emission: Callable[[float, Emission], None],
    on_reject: Callable[[float, SimRequest], None] | None = None,
) -> float:
    """Run ``engine`` on a virtual clock over ``arrivals`` (time-ordered) until idle; returns the end time.

    A request that arrives during an iteration joins at the next iteration boundary, as in a real engine.
    """
    pending = deque(sorted(arrivals, key=lambda a: a[0]))
    now = 0.0
    while pending or not engine.idle:
        while pending and pending[0][0] <= now:
            at, request = pending.popleft()
            if not engine.submit(request) and on_reject is not None:
                on_reject(at, request)
        batch = engine.schedule(now)
        if batch is None:
            if not pending:
                break
            now = pending[0][0]
            continue
        for emission in engine.complete(batch):
            on_emission(batch.end, emission)
        now = batch.end
    return now
