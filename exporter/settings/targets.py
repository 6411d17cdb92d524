"""The ``targets`` section: endpoints, how to reach them (auth, headers, timeouts, TLS), their engine
metrics and those of the gateway in front of them, which modules probe them under which SLO, and their probe budget.

How to reach a target (API, key, headers, extra body, timeouts) is read by ``exporter.settings.target``,
as the flags of a one-shot run are.
"""

from __future__ import annotations

from exporter.settings import bounds
from exporter.settings.addresses import check_target_url, check_url
from exporter.settings.cost import read_cost
from exporter.settings.model import DEFAULT_SLO, Budget, EngineMetrics, Target, Tls
from exporter.settings.reader import (
    Context,
    Section,
    check_name,
)
from exporter.settings.target import (
    ENGINE_KINDS,
    GATEWAY_KINDS,
    TIMEOUT_KEYS,
    Timeouts,
    read_api,
    read_ca_file,
    read_extra_body,
    read_headers,
    read_secret,
    read_timeouts,
)
from exporter.settings.values import reference

TARGET_KEYS = (
    "name", "url", "api", "model", "api_key", "headers", "extra_body", "timeouts", "tls",
    "engine_metrics", "gateway_metrics", "modules", "slo", "budget", "simulated", "calibrate_prompts", "gpus",
    "gpu_hour_price",
)  # fmt: skip
ENGINE_KEYS = ("url", "kind", "interval", "model", "bearer_token")
BUDGET_KEYS = ("max_requests_per_hour", "max_tokens_per_hour", "backoff_after_failures", "max_backoff")


class TargetReader:
    """Reads targets; a target's modules and SLO must be among the names the file defines."""

    def __init__(self, ctx: Context, module_names: list[str], slo_names: list[str]) -> None:
        self.ctx = ctx
        self.module_names = module_names
        self.slo_names = slo_names
        self.seen: dict[str, str] = {}  # target name -> path of the target that has it

    def targets(self, top: Section, *, required: bool = True) -> tuple[Target, ...]:
        """The targets; at least one when ``required`` (a config that observes traffic may have none)."""
        raw = top.get("targets")
        if raw is None:
            if required:
                top.fail("targets", "missing (required): list at least one target")
            return ()
        items = top.items("targets")
        if not items and isinstance(raw, list) and required:
            top.fail("targets", "must list at least one target")
        sections = (Section.open(item, path, self.ctx.problems, TARGET_KEYS) for path, item in items)
        return tuple(self.target(sec) for sec in sections if sec is not None)

    def target(self, sec: Section) -> Target:
        name = sec.read("name", "", check_name, resolve=False) if sec.required("name") else ""
        if name in self.seen:
            sec.fail("name", f'duplicate target name "{name}" (also {self.seen[name]})')
        elif name:
            self.seen[name] = sec.path
        url = sec.read("url", "", check_target_url, resolve=False) if sec.required("url") else ""
        timeouts, tls = sec.section("timeouts", TIMEOUT_KEYS), sec.section("tls", ("verify", "ca_file"))
        engine, budget = sec.section("engine_metrics", ENGINE_KEYS), sec.section("budget", BUDGET_KEYS)
        gateway = sec.section("gateway_metrics", ENGINE_KEYS)
        cost = read_cost(sec)
        headers, secret_headers = read_headers(self.ctx, sec)
        return Target(
            name=name,
            url=url,
            api=read_api(sec),
            model=sec.opt_string("model"),
            api_key=read_secret(self.ctx, sec, "api_key", "the API key"),
            headers=headers,
            secret_headers=secret_headers,
            extra_body=read_extra_body(sec),
            timeouts=read_timeouts(timeouts) if timeouts is not None else Timeouts(),
            tls=self.tls(tls) if tls is not None else Tls(),
            engine_metrics=self.engine_metrics(engine) if engine is not None else None,
            gateway_metrics=self.engine_metrics(gateway, GATEWAY_KINDS) if gateway is not None else None,
            modules=self.module_refs(sec),
            slo=self.reference(sec, "slo", DEFAULT_SLO, "slo", self.slo_names),
            budget=self.budget(budget) if budget is not None else Budget(),
            simulated=sec.boolean("simulated", False),
            calibrate_prompts=sec.boolean("calibrate_prompts", True),
            gpus=cost.gpus,
            gpu_hour_price=cost.gpu_hour_price,
        )

    def tls(self, sec: Section) -> Tls:
        return Tls(verify=sec.boolean("verify", True), ca_file=read_ca_file(self.ctx, sec))

    def engine_metrics(self, sec: Section, kinds: tuple[str, ...] = ENGINE_KINDS) -> EngineMetrics:
        """An engine's (or, with the gateway ``kinds``, a gateway's) /metrics scrape."""
        url = sec.read("url", "", check_url, resolve=False) if sec.required("url") else ""
        return EngineMetrics(
            url=url,
            kind=sec.choice("kind", "auto", kinds),
            interval_s=sec.duration("interval", 15.0, maximum=bounds.MAX_SCRAPE_INTERVAL_S),
            model=sec.opt_string("model"),
            bearer_token=read_secret(self.ctx, sec, "bearer_token", "the /metrics bearer token"),
        )

    def module_refs(self, sec: Section) -> tuple[str, ...]:
        if not sec.has("modules"):
            return tuple(self.module_names)
        refs: list[str] = []
        for path, raw in sec.items("modules"):
            name = self.ctx.value(path, raw, lambda v: reference(v, "module", self.module_names))
            if name in refs:
                self.ctx.problems.add(path, f'module "{name}" is listed twice')
            elif name is not None:
                refs.append(name)
        return tuple(refs)

    def reference(self, sec: Section, key: str, default: str, kind: str, valid: list[str]) -> str:
        return sec.read(key, default, lambda v: reference(v, kind, valid), resolve=False)

    def budget(self, sec: Section) -> Budget:
        return Budget(
            max_requests_per_hour=sec.opt_integer(
                "max_requests_per_hour", None, 1, bounds.MAX_REQUESTS_PER_HOUR
            ),
            max_tokens_per_hour=sec.opt_integer("max_tokens_per_hour", None, 1, bounds.MAX_TOKENS_PER_HOUR),
            backoff_after_failures=sec.integer(
                "backoff_after_failures", 3, 1, bounds.MAX_BACKOFF_AFTER_FAILURES
            ),
            max_backoff_s=sec.duration("max_backoff", 600.0, maximum=bounds.MAX_BACKOFF_S),
        )
