"""Simulator configuration: flags or a YAML file -> one frozen, validated ``SimConfig``.

Unknown keys are rejected (a misspelled key would otherwise be ignored without a word), and every error
names the field and what it accepts. ``resolve`` merges a config with its preset into what the engine runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.settings.problems import SettingsError
from exporter.sim.costmodel import CostModel
from exporter.sim.engine import EngineParams
from exporter.sim.engine_presets import PRESETS
from exporter.sim.protocol import FAULT_MODES


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulator can be told. ``None`` means "the preset's value"."""

    preset: str = "tiny"
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    chunked_prefill: bool | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    num_kv_blocks: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None
    max_waiting: int = 1024
    spec_k: int = 0
    spec_acceptance: float = 0.7
    eos_rate: float = 0.0
    default_max_tokens: int = 256
    seed: int = 0
    fault_rates: Mapping[str, float] = field(default_factory=dict)
    cost: Mapping[str, float] = field(default_factory=dict)
    record_lateness: bool = False
    prefix_caching: bool = True


@dataclass(frozen=True)
class Resolved:
    """A config merged with its preset: what the server and engine actually use."""

    config: SimConfig
    model: str
    cost: CostModel
    engine: EngineParams


# (type, minimum, maximum): the checks every scalar field gets.
_INT_MIN = {
    "port": 0,
    "max_num_seqs": 1,
    "max_num_batched_tokens": 1,
    "num_kv_blocks": 1,
    "block_size": 1,
    "max_model_len": 1,
    "max_waiting": 0,
    "spec_k": 0,
    "default_max_tokens": 1,
    "seed": 0,
}
_PROBABILITIES = ("spec_acceptance", "eos_rate")
_BOOLS = ("chunked_prefill", "record_lateness", "prefix_caching")
_STRINGS = ("preset", "model", "host")
_COST_FIELDS = tuple(f.name for f in dataclasses.fields(CostModel))
FIELDS = tuple(f.name for f in dataclasses.fields(SimConfig))


def _fail(name: str, expected: str, value: object) -> SettingsError:
    return SettingsError(f"{name}: expected {expected}, got {value!r}")


_ENGINE_OVERRIDES: tuple[str, ...] = (
    "chunked_prefill",
    "max_num_seqs",
    "max_num_batched_tokens",
    "num_kv_blocks",
)
_ENGINE_OVERRIDES += ("block_size", "max_model_len")
_OPTIONAL = ("model", *_ENGINE_OVERRIDES)


def _check_scalar(name: str, value: object) -> None:
    if value is None and name in _OPTIONAL:
        return
    if name in _INT_MIN:
        if isinstance(value, bool) or not isinstance(value, int) or value < _INT_MIN[name]:
            raise _fail(name, f"an integer >= {_INT_MIN[name]}", value)
        if name == "port" and value > 65535:
            raise _fail(name, "an integer in 0..65535", value)
    elif name in _PROBABILITIES:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise _fail(name, "a number in 0..1", value)
    elif name in _BOOLS:
        if not isinstance(value, bool):
            raise _fail(name, "true or false", value)
    elif name in _STRINGS and (not isinstance(value, str) or not value):
        raise _fail(name, "a non-empty string", value)


def _check_mapping(name: str, value: object, valid: tuple[str, ...], upper: float | None) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise _fail(name, f"a mapping of {', '.join(valid)} to numbers", value)
    checked: dict[str, float] = {}
    for key, number in value.items():
        if key not in valid:
            raise SettingsError(f'{name}: unknown key "{key}"; valid: {", ".join(valid)}')
        bad = isinstance(number, bool) or not isinstance(number, int | float) or number < 0
        if bad or (upper is not None and number > upper):
            bound = f"a number in 0..{upper}" if upper is not None else "a number >= 0"
            raise _fail(f"{name}.{key}", bound, number)
        checked[str(key)] = float(number)
    return checked


def validate(config: SimConfig) -> SimConfig:
    """Return ``config`` if every field is valid, else raise ``SettingsError`` naming the field."""
    for name in FIELDS:
        if name not in ("fault_rates", "cost"):
            _check_scalar(name, getattr(config, name))
    if config.preset not in PRESETS:
        raise SettingsError(f'preset: unknown preset "{config.preset}"; valid: {", ".join(PRESETS)}')
    rates = _check_mapping("fault_rates", config.fault_rates, FAULT_MODES, 1.0)
    if sum(rates.values()) > 1.0:
        raise SettingsError(f"fault_rates: rates must sum to at most 1, got {sum(rates.values()):g}")
    _check_mapping("cost", config.cost, _COST_FIELDS, None)
    return config


def from_mapping(data: Mapping[str, Any], base: SimConfig | None = None) -> SimConfig:
    """A validated config from a mapping (a parsed YAML file or flags), on top of ``base``."""
    unknown = sorted(set(data) - set(FIELDS), key=str)  # YAML keys may be numbers too
    if unknown:
        raise SettingsError(f'unknown key "{unknown[0]}"; valid: {", ".join(FIELDS)}')
    try:
        config = dataclasses.replace(base or SimConfig(), **data)
    except TypeError as exc:  # pragma: no cover - guarded by the unknown-key check
        raise SettingsError(str(exc)) from exc
    return validate(config)


def load_yaml(path: Path) -> SimConfig:
    """Read and validate a YAML config file; errors name the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SettingsError(f"{path}: expected a mapping at the top level")
    try:
        return from_mapping(data)
    except SettingsError as exc:
        raise SettingsError(f"{path}: {exc}") from exc


def resolve(config: SimConfig) -> Resolved:
    """Merge ``config`` with its preset; without chunked prefill the token budget fits a whole prompt."""
    preset = PRESETS[config.preset]
    overrides = {
        name: getattr(config, name) for name in _ENGINE_OVERRIDES if getattr(config, name) is not None
    }
    engine = dataclasses.replace(
        preset.engine,
        **overrides,
        max_waiting=config.max_waiting,
        spec_k=config.spec_k,
        spec_acceptance=config.spec_acceptance,
        prefix_caching=config.prefix_caching,
    )
    if not engine.chunked_prefill and config.max_num_batched_tokens is None:
        # vLLM V0 without chunked prefill: max(max_model_len, 2048), so any prompt fits one step.
        engine = dataclasses.replace(
            engine, max_num_batched_tokens=max(engine.max_model_len, engine.max_num_batched_tokens)
        )
    if not engine.chunked_prefill and engine.max_num_batched_tokens < engine.max_model_len:
        raise SettingsError(
            "max_num_batched_tokens: must be >= max_model_len when chunked_prefill is off "
            f"({engine.max_num_batched_tokens} < {engine.max_model_len}), or no long prompt could ever run"
        )
    if engine.max_num_batched_tokens < 1 + engine.spec_k:
        raise SettingsError("max_num_batched_tokens: must be at least spec_k + 1")
    cost = dataclasses.replace(preset.cost, **dict(config.cost))
    return Resolved(config, config.model or preset.model, cost, engine)
