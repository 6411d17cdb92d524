"""YAML text -> ``Config``, or one ``SettingsError`` that lists every problem of the file with its path.

The file is read in one pass: YAML (a duplicate key is a problem; PyYAML would keep the last one without
a word), ``${ENV}`` expansion, then each section (``global`` here, ``targets`` in ``targets.py``,
``modules`` and ``slos`` in ``modules.py``, ``jobs`` in ``jobs.py``); a target's modules and SLO, and a
scheduled job's target and module, are checked against the names the file defines. Relative file paths (``api_key.file``, ``tls.ca_file``, ``slos.*.prefill.model_file``,
``global.state_dir``) are relative to the config file's folder. Nothing is returned unless the whole file
is valid, so a reload can swap configs only after a full successful parse.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from exporter.settings import bounds
from exporter.settings.addresses import check_listen_address
from exporter.settings.buckets import BUCKET_PRESET_NAMES
from exporter.settings.jobs import JOBS_KEYS, JobsReader
from exporter.settings.model import (
    BUCKET_NAMES,
    DEFAULT_LISTEN_ADDRESS,
    DEFAULT_SLO,
    Buckets,
    Config,
    GlobalConfig,
    JobsConfig,
)
from exporter.settings.modules import MODULE_KEYS, ModuleReader
from exporter.settings.problems import Problem, Problems, SettingsError
from exporter.settings.reader import (
    Context,
    Section,
    check_name,
    child_path,
    expand_env,
    positive_duration,
    resolve_scalar,
    show,
    string_value,
)
from exporter.settings.slo import SLO_KEYS
from exporter.settings.target import read_secret
from exporter.settings.targets import TargetReader
from exporter.settings.traffic import TRAFFIC_KEYS, read_traffic
from exporter.settings.values import bucket_bound, check_state_dir

TOP_KEYS = ("global", "targets", "modules", "slos", "jobs", "traffic")
GLOBAL_KEYS = (
    "listen_address",
    "jobs_listen_address",
    "windows",
    "max_results_per_window",
    "state_dir",
    "buckets",
    "probe_token",
)
DEFAULT_WINDOWS_S = (300.0, 3600.0)

T = TypeVar("T")
# A check across sections handed in by a caller: it adds to ``ctx.problems`` (``unread`` says which
# values are defaults in place of bad ones).
ConfigCheck = Callable[[Context, Config], None]


def parse_config(
    text: str,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    source: str = "<text>",
    checks: Sequence[ConfigCheck] = (),
) -> Config:
    """The config in YAML ``text``; raises ``SettingsError`` listing every problem.

    ``environ`` (default: the process environment) serves ``${NAME}`` and ``api_key: {env: NAME}``;
    ``checks`` run after the checks across sections, over the same problems (the daemon's and
    check-config's: ``exporter.load.config_workloads.CONFIG_CHECKS``, which draw workloads).
    """
    problems = Problems()
    tree = _load_yaml(text, problems)
    if problems:
        raise SettingsError(problems.items)
    env = os.environ if environ is None else environ
    tree = expand_env(tree, env, problems)
    ctx = Context(problems, Path(base_dir) if base_dir is not None else None, env)
    config = _config(ctx, tree, source, checks)
    if problems or config is None:
        raise SettingsError(problems.items)
    return config


def load_config_file(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    checks: Sequence[ConfigCheck] = (),
) -> Config:
    """The config in the YAML file at ``path`` (relative paths inside it are relative to its folder)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError([f"{path}: cannot read the config file: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(
            [
                f"{path}: not a UTF-8 text file (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                "a config is YAML text"
            ]
        ) from None
    return parse_config(text, base_dir=Path(path).parent, environ=environ, source=str(path), checks=checks)


def load_config(
    source: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    checks: Sequence[ConfigCheck] = (),
) -> Config:
    """A config from a file (a ``Path``, or a string of one line) or from YAML text (a string of several
    lines, or a one-line ``{...}`` flow mapping)."""
    if isinstance(source, str) and ("\n" in source or source.lstrip().startswith("{")):
        return parse_config(source, environ=environ, checks=checks)
    return load_config_file(source, environ=environ, checks=checks)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, recording duplicate keys instead of keeping the last one."""

    duplicates: list[str]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            hashable = isinstance(key, str | int | float | bool)
            if hashable and key in seen:
                mark = key_node.start_mark
                self.duplicates.append(
                    f"line {mark.line + 1}, column {mark.column + 1}: duplicate key {show(key)}"
                )
            seen.add(key if hashable else id(key))
        return super().construct_mapping(node, deep)


def _load_yaml(text: str, problems: Problems) -> Any:
    loader = _Loader(text)
    loader.duplicates = []
    try:
        tree = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        problems.add("yaml", _yaml_message(exc))
        return None
    except yaml.YAMLError as exc:
        problems.add("yaml", str(exc))
        return None
    finally:
        loader.dispose()
    for duplicate in loader.duplicates:
        problems.add("yaml", duplicate)
    return tree


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = f" ({exc.context})" if exc.context else ""
    return f"{where}{exc.problem or 'invalid YAML'}{context}"


def _config(ctx: Context, tree: Any, source: str, checks: Sequence[ConfigCheck]) -> Config | None:
    if tree is None:
        ctx.problems.add("", "the config is empty; it needs at least one target under targets")
        return None
    top = Section.open(tree, "", ctx.problems, TOP_KEYS)
    if top is None:
        return None
    raw_modules, raw_slos = top.get("modules"), top.get("slos")
    module_names = [str(k) for k in raw_modules] if isinstance(raw_modules, Mapping) else []
    slo_names = {DEFAULT_SLO, *(str(k) for k in raw_slos)} if isinstance(raw_slos, Mapping) else {DEFAULT_SLO}
    section = top.section("global", GLOBAL_KEYS)
    global_ = _global(ctx, section) if section is not None else GlobalConfig()
    traffic_section = top.section("traffic", TRAFFIC_KEYS)
    traffic = read_traffic(ctx, traffic_section, sorted(slo_names)) if traffic_section is not None else None
    # Observing real traffic is a reason to run without a target (observe only).
    targets = TargetReader(ctx, module_names, sorted(slo_names)).targets(top, required=traffic is None)
    reader = ModuleReader(ctx)
    modules = _named(ctx, top, "modules", MODULE_KEYS, reader.module)
    slos = _named(ctx, top, "slos", SLO_KEYS, reader.slo)
    jobs_section = top.section("jobs", JOBS_KEYS)
    jobs = JobsReader(ctx, targets).jobs(jobs_section) if jobs_section is not None else JobsConfig()
    # The checks across sections run over what could be read, so every problem is said at once (a
    # problem in one section hid them: each fix revealed the next); a module that is not there is skipped.
    secret_files = tuple(dict.fromkeys(ctx.secret_files))
    config = Config(global_, targets, modules, slos, source, jobs, secret_files, traffic)
    check_runs_fit(ctx, config)
    check_windows_fit(ctx, config)
    for check in checks:
        check(ctx, config)
    return None if ctx.problems else config


def _named(
    ctx: Context, top: Section, key: str, keys: tuple[str, ...], build: Callable[[str, Section], T]
) -> dict[str, T]:
    """A mapping of label-safe names to sections, each read by ``build``."""
    raw = top.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        top.fail(key, f"must be a mapping of names to {key}, got {show(raw)}")
        return {}
    built: dict[str, T] = {}
    for name, item in raw.items():
        path = child_path(key, str(name))
        ctx.value(path, name, check_name)
        sec = Section.open({} if item is None else item, path, ctx.problems, keys)
        if sec is not None:
            built[str(name)] = build(str(name), sec)
    return built


def _global(ctx: Context, sec: Section) -> GlobalConfig:
    buckets = sec.section("buckets", ("preset", *BUCKET_NAMES))
    state_dir = sec.read(
        "state_dir", None, lambda v: None if v is None else check_state_dir(ctx.path(string_value(v))), False
    )
    return GlobalConfig(
        listen_address=sec.read(
            "listen_address", DEFAULT_LISTEN_ADDRESS, check_listen_address, resolve=False
        ),
        jobs_listen_address=sec.read(
            "jobs_listen_address", None, lambda v: None if v is None else check_listen_address(v), False
        ),
        windows_s=_windows(ctx, sec) if sec.has("windows") else DEFAULT_WINDOWS_S,
        max_results_per_window=sec.integer("max_results_per_window", 2000, 1, bounds.MAX_RESULTS_PER_WINDOW),
        state_dir=state_dir,
        buckets=_buckets(ctx, buckets) if buckets is not None else Buckets(),
        probe_token=read_secret(ctx, sec, "probe_token", "the /probe bearer token"),
    )


def _windows(ctx: Context, sec: Section) -> tuple[float, ...]:
    items = sec.items("windows")
    if not items and isinstance(sec.get("windows"), list | None):
        sec.fail("windows", "must list at least one window, e.g. [5m, 1h]")
    windows: list[float] = []
    for path, raw in items:
        seconds = ctx.value(path, raw, lambda v: positive_duration(v, bounds.MAX_WINDOW_S))
        if seconds is not None and seconds in windows:
            ctx.problems.add(path, f"duplicate window {show(raw)}")
        elif seconds is not None:
            windows.append(seconds)
    return tuple(windows)


def _buckets(ctx: Context, sec: Section) -> Buckets:
    overrides = {name: _bucket_list(ctx, sec, name) for name in BUCKET_NAMES if sec.has(name)}
    return Buckets(preset=sec.choice("preset", "default", BUCKET_PRESET_NAMES), **overrides)


def _bucket_list(ctx: Context, sec: Section, name: str) -> tuple[float, ...] | None:
    items = sec.items(name)
    if not items:
        if isinstance(sec.get(name), list):
            sec.fail(name, "must list at least one bucket bound")
        return None
    high = 1.0 if name == "fluidity" else math.inf
    bounds: list[float] = []
    for path, raw in items:
        value = ctx.value(path, raw, lambda v: bucket_bound(resolve_scalar(v), high))
        if value is None:
            continue
        if bounds and value <= bounds[-1]:
            ctx.problems.add(
                path, f"buckets must be strictly ascending, got {show(raw)} after {bounds[-1]:g}"
            )
        bounds.append(value)
    return tuple(bounds)


def unread(ctx: Context, *paths: str) -> bool:
    """Whether a problem was found at or under any of ``paths``: the values read there are defaults in
    place of bad ones, and a check across sections would judge the defaults, not what was written."""
    return any(
        problem.path == path or problem.path.startswith((f"{path}.", f"{path}["))
        for problem in ctx.problems.items
        if isinstance(problem, Problem)
        for path in paths
    )


def check_windows_fit(ctx: Context, config: Config) -> None:
    """The longest rolling window must hold what a module sends in it: past
    ``global.max_results_per_window`` results the oldest are dropped, and a "1d" window of a module
    probed every 30 s would silently cover its last 2,000 requests (42 minutes at 4 a run) while its
    gauges said a day. Modules on a cron line are not counted (their rate varies)."""
    if unread(ctx, "global.windows", "global.max_results_per_window") or not config.global_.windows_s:
        return
    cap, longest = config.global_.max_results_per_window, max(config.global_.windows_s)
    for name in sorted({m for target in config.targets for m in target.modules if m in config.modules}):
        module = config.modules[name]
        if unread(ctx, f"modules.{name}"):
            continue
        interval = module.schedule.interval_s
        if interval is None or module.schedule.cron is not None:
            continue
        held = math.ceil(longest / interval) * module.requests_per_run
        if held > cap:
            ctx.problems.add(
                "global.max_results_per_window",
                f"{cap} results hold less than the {longest:g} s window of modules.{name} (about {held}: "
                f"{module.requests_per_run} every {interval:g} s); raise it to at least {held}, or "
                "shorten global.windows",
            )


def check_runs_fit(ctx: Context, config: Config) -> None:
    """Every module a target probes must be able to run at all: its requests in the target's api and a
    run's requests within the target's hourly budget (a run over it is skipped every time, without a
    word; the tokens of a run are checked by ``exporter.load.config_workloads``, which draws them)."""
    for index, target in enumerate(config.targets):
        budget, path = target.budget, f"targets[{index}].budget"
        for name in target.modules:
            module = config.modules.get(name)
            if module is None or unread(ctx, f"modules.{name}"):
                continue  # an unknown module, or values that are defaults in place of bad ones
            problem = module.problem_with(target)
            if problem is not None:
                ctx.problems.add(f"targets[{index}]", problem)
                continue  # nothing of it can run, within a budget or not
            if unread(ctx, path):
                continue
            runs = module.requests_per_run
            if budget.max_requests_per_hour is not None and runs > budget.max_requests_per_hour:
                ctx.problems.add(
                    f"{path}.max_requests_per_hour",
                    f"{budget.max_requests_per_hour} is below modules.{name}.requests_per_run ({runs}): "
                    "that module could never run; raise the budget or lower requests_per_run",
                )
