"""How a one-shot run reaches its target, from its flags: URL, API, key, headers, body, TLS, timeouts.

The flags are read as a ``targets[]`` entry of the daemon config is, by the readers of
``exporter.settings.target``: ``target_tree`` puts their values in that shape and ``TARGET_FLAGS`` names
the flag of each config path, so a bad value fails with the config's message under the flag's name.
``--url`` is checked by the config's one rule for a target's URL (``check_target_url``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from exporter.settings.addresses import check_target_url
from exporter.settings.oneshot import FlagReading, RawFlags, given, json_object, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.reader import Context, Section
from exporter.settings.target import (
    TIMEOUT_KEYS,
    TargetSettings,
    Timeouts,
    read_api,
    read_ca_file,
    read_extra_body,
    read_headers,
    read_secret,
    read_timeouts,
)

# The flag that gives each part of a target (a config path, as the readers report problems under it).
TARGET_FLAGS: Final = {
    "api": "--api",
    "model": "--model",
    "api_key": "--api-key-env/--api-key-file",
    "api_key.env": "--api-key-env",
    "api_key.file": "--api-key-file",
    "headers": "--header",
    "extra_body": "--extra-body",
    "timeouts": "--ttft-timeout/--idle-timeout/--total-timeout",
    "timeouts.ttft": "--ttft-timeout",
    "timeouts.idle": "--idle-timeout",
    "timeouts.total": "--total-timeout",
    "tls.ca_file": "--ca-file",
}
TARGET_FLAG_KEYS: Final = ("api", "model", "api_key", "headers", "extra_body", "timeouts", "tls")


@dataclass(frozen=True)
class TargetFlags:
    """The target flags read: ``url`` (None: start the built-in simulator, ``sim_preset`` its preset),
    how to reach it (``settings``, whose ``base_url`` is set by ``at`` once the URL is known) and whether
    to calibrate prompts to its tokenizer (``--no-calibrate`` not given)."""

    url: str | None
    settings: TargetSettings
    sim_preset: str | None = None
    calibrate: bool = True

    def at(self, url: str) -> TargetSettings:
        """How to reach the target at ``url`` (``--url``, or the simulator's once started)."""
        return dataclasses.replace(self.settings, base_url=url)


def read_target_flags(raw: RawFlags) -> TargetFlags:
    """The target flags, every bad one reported together."""
    reading = FlagReading()
    url = reading(lambda: read_url(raw.get("url")))
    settings = reading(lambda: read_target_settings(raw))
    reading.done()
    assert settings is not None
    return TargetFlags(url, settings, raw.get("sim_preset"), not raw.get("no_calibrate"))


def read_url(url: str | None) -> str | None:
    """``--url``, by the config's rule for a target's URL (``check_target_url``: a trailing ``/v1`` is
    left out); None for the built-in simulator."""
    if url is None:
        return None
    try:
        return check_target_url(url)
    except ValueError as exc:
        raise SettingsError(f"--url: {exc}") from None


def read_target_settings(raw: RawFlags, url: str = "") -> TargetSettings:
    """How to reach the target at ``url`` (by default none yet: ``TargetFlags.at`` sets it)."""
    return read_flags(target_tree(raw), TARGET_FLAG_KEYS, _reader(raw, url), TARGET_FLAGS)


def target_tree(raw: RawFlags) -> dict[str, Any]:
    """The target flags given, as a ``targets[]`` entry of the daemon config."""
    key_ref = given(env=raw.get("api_key_env"), file=raw.get("api_key_file"))
    timeouts = given(
        ttft=raw.get("ttft_timeout"), idle=raw.get("idle_timeout"), total=raw.get("total_timeout")
    )
    headers, extra_body, ca_file = raw.get("header"), raw.get("extra_body"), raw.get("ca_file")
    return given(
        api=raw.get("api"),
        model=raw.get("model"),
        api_key=key_ref or None,
        headers=dict(_header(h) for h in headers) if headers else None,
        extra_body=json_object(extra_body, "--extra-body") if extra_body else None,
        timeouts=timeouts or None,
        tls={"ca_file": ca_file} if ca_file is not None else None,
    )


def _reader(raw: RawFlags, url: str) -> Callable[[Section], TargetSettings]:
    """The settings read from a ``targets[]``-shaped section (TLS from its own flags)."""

    def read(sec: Section) -> TargetSettings:
        timeouts, tls = sec.section("timeouts", TIMEOUT_KEYS), sec.section("tls", ("ca_file",))
        ctx = Context(sec.problems, None, os.environ)
        headers, secret_headers = read_headers(ctx, sec)
        return TargetSettings(
            base_url=url,
            api=read_api(sec),
            model=sec.opt_string("model"),
            api_key=read_secret(ctx, sec, "api_key", "the API key"),
            headers=headers,
            secret_headers=secret_headers,
            extra_body=read_extra_body(sec),
            timeouts=read_timeouts(timeouts) if timeouts is not None else Timeouts(),
            verify_tls=not raw.get("insecure"),
            ca_file=read_ca_file(ctx, tls) if tls is not None else None,
        )

    return read


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise SettingsError(f'--header "{text}": expected NAME:VALUE')
    return name.strip(), value.strip()
