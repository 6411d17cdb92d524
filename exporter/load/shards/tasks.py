"""The shard protocol's one serialisable format: a slice of a plan in, per-request results out (JSON).

A load too heavy for one client process is sharded: the coordinator deals the plan's requests to K
shards (worker processes on this machine, or the pods of a Kubernetes Indexed Job), and each shard
sends its slice and reports what came back. Both backends speak exactly this format over HTTP, so the
path tested here with local processes is the one the pods take.

* ``ShardTask`` (coordinator -> shard): the target's settings (never its API key: a shard reads that
  from its own file, ``--api-key-file``, or else ``FLUIDITY_SHARD_API_KEY``), the entries ``(plan index, offset, spec)`` of
  an open loop or the specs and concurrency share of a closed loop, an optional duration.
* Events (shard -> coordinator, batched): requests started (index, scheduled time), first tokens
  (index, time), finished or cancelled results, and at the end the shard's figures: requests sent,
  CPU and wall seconds, and how its sends ended (``ended_by``: ``requests``, ``duration`` when the
  task's duration left entries unsent, or ``stop``).

Timestamps cross machines as seconds since the common start instant (``origin``): every shard stamps
with its own ``time.perf_counter``, which means nothing on another machine, and converts once to
"since the start"; the coordinator adds its own monotonic equivalent of that instant. Intervals within
one request never depend on it; lining requests of different machines up does, to within the clocks'
NTP offset.

Dealing: an open loop's requests go round-robin by due time (every shard gets an even share of every
part of the schedule; the merged schedule is exactly the planned one, so common random numbers and the
verdict are those of one process: a Poisson process thinned K ways is K Poisson processes at rate/K,
round-robin gives each shard a smoother share of the same arrivals). A closed loop's concurrency is split
as evenly as it goes, and its requests are dealt in proportion to each shard's share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.load.plan import LoadPlan
from exporter.settings.target import TargetSettings
from exporter.streams.request import FollowUp, RequestSpec, Timeouts
from exporter.streams.result import Outcome, ProbeResult, TokenSource

# 2: a shard's final figures say how its sends ended (``ended_by``). A version-1 shard leaves that out,
# and a trial its duration cut would read as one that sent every request: refused instead.
# 3: a result says how many of its gaps its flag concerns (``merged_events``, ``doubtful_gaps``). A
# version-2 shard's flagged results would count none, and a version-2 coordinator refuses the fields.
# 4: a result says how many of its reads had an impossibly early kernel stamp (``early_stamps``), part
# of its flag: a version-3 shard would leave them out, and a version-3 coordinator refuses the field.
PROTOCOL_VERSION = 4
API_KEY_ENV = "FLUIDITY_SHARD_API_KEY"  # the target's API key, when no --api-key-file is given
TOKEN_ENV = "FLUIDITY_SHARD_TOKEN"  # the bearer token a shard presents, when no --token-file is given
# ProbeResult fields holding perf_counter stamps: rebased to the start instant on the wire.
STAMPS = ("scheduled_at", "sent_at", "headers_at", "finished_at")
STAMP_LISTS = ("token_times", "reasoning_times")


class ProtocolError(ValueError):
    """A message that does not follow the shard protocol (names what is wrong)."""


@dataclass(frozen=True)
class ShardEntry:
    """One request of a shard's slice: its index in the whole plan and, open loop, its offset (s)."""

    index: int
    offset: float | None
    spec: RequestSpec


@dataclass(frozen=True)
class ShardTask:
    """What one shard sends in one run: its slice of the plan, open loop or at a concurrency share."""

    run: str
    shard: int
    shards: int
    settings: TargetSettings
    entries: tuple[ShardEntry, ...]
    concurrency: int | None = None  # closed loop: this shard's share of the slots
    duration_s: float | None = None  # no new sends after this many seconds from the start

    @property
    def open_loop(self) -> bool:
        return self.concurrency is None


# -- dealing a plan --------------------------------------------------------------------------------


def deal_open(offsets: Sequence[float], shards: int) -> list[list[int]]:
    """Plan indices per shard, round-robin by due time (ties by index)."""
    order = sorted(range(len(offsets)), key=lambda i: (offsets[i], i))
    return [order[shard::shards] for shard in range(shards)]


def split_concurrency(concurrency: int, shards: int) -> list[int]:
    """``concurrency`` slots over ``shards`` as evenly as they go (the first ones get the remainder)."""
    base, extra = divmod(concurrency, shards)
    return [base + (1 if shard < extra else 0) for shard in range(shards)]


def deal_closed(requests: int, shares: Sequence[int]) -> list[list[int]]:
    """Plan indices per shard, in order, each request to the shard with the fewest per slot so far."""
    dealt: list[list[int]] = [[] for _ in shares]
    for index in range(requests):
        shard = min(
            (s for s, share in enumerate(shares) if share > 0), key=lambda s: (len(dealt[s]) / shares[s], s)
        )
        dealt[shard].append(index)
    return dealt


# -- JSON forms -------------------------------------------------------------------------------------


def spec_to_json(spec: RequestSpec) -> dict[str, Any]:
    data = dataclasses.asdict(spec)
    data["messages"] = None if spec.messages is None else [list(m) for m in spec.messages]
    data["extra_body"] = [list(item) for item in spec.extra_body]
    return data


def spec_from_json(data: dict[str, Any]) -> RequestSpec:
    fields = dict(data)
    messages = fields.get("messages")
    fields["messages"] = None if messages is None else tuple((str(r), str(c)) for r, c in messages)
    fields["extra_body"] = tuple((str(k), v) for k, v in fields.get("extra_body", ()))
    fields["followups"] = tuple(FollowUp(**f) for f in fields.get("followups", ()))
    known = {f.name for f in dataclasses.fields(RequestSpec)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ProtocolError(f"unknown request fields {unknown}; valid: {', '.join(sorted(known))}")
    return RequestSpec(**fields)


def settings_to_json(settings: TargetSettings) -> dict[str, Any]:
    """The settings without the API key (it never leaves the process that read it)."""
    data = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name != "api_key"}
    data["headers"] = [list(h) for h in settings.headers]
    data["extra_body"] = [list(item) for item in settings.extra_body]
    data["timeouts"] = dataclasses.asdict(settings.timeouts)
    return data


def settings_from_json(data: dict[str, Any], api_key: Any = None) -> TargetSettings:
    fields = dict(data)
    fields["headers"] = tuple((str(k), str(v)) for k, v in fields.get("headers", ()))
    fields["secret_headers"] = tuple(str(name) for name in fields.get("secret_headers", ()))
    fields["extra_body"] = tuple((str(k), v) for k, v in fields.get("extra_body", ()))
    fields["timeouts"] = Timeouts(**fields.get("timeouts", {}))
    known = {f.name for f in dataclasses.fields(TargetSettings)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ProtocolError(f"unknown target settings {unknown}; valid: {', '.join(sorted(known))}")
    return TargetSettings(**fields, api_key=api_key)


def task_to_json(task: ShardTask) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL_VERSION,
        "run": task.run,
        "shard": task.shard,
        "shards": task.shards,
        "settings": settings_to_json(task.settings),
        "entries": [[e.index, e.offset, spec_to_json(e.spec)] for e in task.entries],
        "concurrency": task.concurrency,
        "duration_s": task.duration_s,
    }


def task_from_json(data: dict[str, Any], api_key: Any = None) -> ShardTask:
    """The task in ``data``; ``api_key`` (a ``Secret`` or None) is the shard's own."""
    if data.get("protocol") != PROTOCOL_VERSION:
        raise ProtocolError(
            f"shard protocol {data.get('protocol')!r} is not the one this shard speaks ({PROTOCOL_VERSION}): "
            "run the same image version for the daemon and its shards"
        )
    try:
        return ShardTask(
            run=str(data["run"]),
            shard=int(data["shard"]),
            shards=int(data["shards"]),
            settings=settings_from_json(data["settings"], api_key),
            entries=tuple(ShardEntry(int(i), o, spec_from_json(s)) for i, o, s in data["entries"]),
            concurrency=data.get("concurrency"),
            duration_s=data.get("duration_s"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"a malformed shard task: {type(exc).__name__}: {exc}") from None


def result_to_json(result: ProbeResult, origin: float) -> dict[str, Any]:
    """Every field of ``result``, its stamps as seconds since ``origin`` (the start instant)."""
    data = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    for name in STAMPS:
        data[name] = None if data[name] is None else data[name] - origin
    for name in STAMP_LISTS:
        data[name] = [t - origin for t in data[name]]
    data["outcome"] = result.outcome.value
    data["token_source"] = result.token_source.value
    data["token_counts"] = list(result.token_counts)
    return data


def result_from_json(data: dict[str, Any], origin: float) -> ProbeResult:
    """The result in ``data`` with its stamps on this machine's clock (``origin``: the start instant)."""
    fields = dict(data)
    try:
        for name in STAMPS:
            fields[name] = None if fields.get(name) is None else float(fields[name]) + origin
        for name in STAMP_LISTS:
            fields[name] = [float(t) + origin for t in fields.get(name, ())]
        fields["outcome"] = Outcome(fields.get("outcome", "ok"))
        fields["token_source"] = TokenSource(fields.get("token_source", "chunks"))
        return ProbeResult(**fields)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"a malformed result: {type(exc).__name__}: {exc}") from None


def copy_into(target: ProbeResult, source: ProbeResult) -> None:
    """Overwrite every field of ``target`` with ``source``'s (a coordinator's stand-in for a request in
    flight on a shard becomes its final result, keeping its identity for whoever holds it)."""
    for f in dataclasses.fields(source):
        setattr(target, f.name, getattr(source, f.name))


def plan_tasks(run: str, settings: TargetSettings, plan: LoadPlan, shards: int) -> list[ShardTask]:
    """A plan (open loop: its offsets; closed loop: its concurrency) as one task per shard that gets a
    share of it (a closed loop with fewer slots than shards leaves some out)."""
    if (plan.offsets is None) == (plan.concurrency is None):
        raise ValueError("give exactly one of offsets (open loop) or concurrency (closed loop)")
    specs, offsets = plan_specs(plan), plan.offsets
    if offsets is not None:
        dealt = deal_open([float(o) for o in offsets][: len(specs)], shards)
        shares: list[int | None] = [None] * shards
    else:
        assert plan.concurrency is not None
        slots = split_concurrency(plan.concurrency, shards)
        dealt, shares = deal_closed(len(specs), slots), list(slots)
    tasks = []
    for shard, indices in enumerate(dealt):
        if not indices or shares[shard] == 0:
            continue
        entries = tuple(
            ShardEntry(i, None if offsets is None else float(offsets[i]), specs[i]) for i in indices
        )
        tasks.append(ShardTask(run, shard, shards, settings, entries, shares[shard], plan.duration))
    return tasks


def plan_specs(plan: LoadPlan) -> Sequence[RequestSpec]:
    """The plan's specs as a sequence: a plan dealt over shards is drawn in full before it starts."""
    if isinstance(plan.specs, Sequence):
        return plan.specs
    raise ValueError("a plan dealt over shards needs its specs drawn up front (a count, not a duration)")
