"""How to reach a one-shot run's target, from its options: URL, API, key, headers, body, TLS, timeouts.

The flags are read as a ``targets[]`` entry of the daemon config is, by the readers of
``exporter.settings.target``: ``target_tree`` puts their values in that shape and ``TARGET_FLAGS`` names
the flag of each config path, so a bad value fails with the config's message under the flag's name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final

from exporter.settings.addresses import check_target_url
from exporter.settings.oneshot import Options, json_object, read_flags
from exporter.settings.problems import SettingsError
from exporter.settings.reader import Context, Section
from exporter.settings.target import (
    TIMEOUT_KEYS,
    Api,
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


def option_url(options: Options) -> str | None:
    """``--url``, by the config's rule for a target's URL (``check_target_url``: a trailing ``/v1`` is
    left out); None for the built-in simulator."""
    url = options["url"]
    if url is None:
        return None
    try:
        return check_target_url(url)
    except ValueError as exc:
        raise SettingsError(f"--url: {exc}") from None


def target_settings(options: Options, url: str) -> TargetSettings:
    """How to reach the target at ``url``."""
    return read_flags(target_tree(options), TARGET_FLAG_KEYS, _reader(options, url), TARGET_FLAGS)


def option_api(options: Options) -> Api:
    """``--api``, chat by default."""
    return read_flags(_given(api=options["api"]), TARGET_FLAG_KEYS, read_api, TARGET_FLAGS)


def target_tree(options: Options) -> dict[str, Any]:
    """The target options given, as a ``targets[]`` entry of the daemon config."""
    key_ref = _given(env=options["api_key_env"], file=options["api_key_file"])
    timeouts = _given(
        ttft=options["ttft_timeout"], idle=options["idle_timeout"], total=options["total_timeout"]
    )
    return _given(
        api=options["api"],
        model=options["model"],
        api_key=key_ref or None,
        headers=dict(_header(h) for h in options["header"]) if options["header"] else None,
        extra_body=json_object(options["extra_body"], "--extra-body") if options["extra_body"] else None,
        timeouts=timeouts or None,
        tls={"ca_file": options["ca_file"]} if options["ca_file"] is not None else None,
    )


def _reader(options: Options, url: str) -> Callable[[Section], TargetSettings]:
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
            verify_tls=not options["insecure"],
            ca_file=read_ca_file(ctx, tls) if tls is not None else None,
        )

    return read


def _given(**values: Any) -> dict[str, Any]:
    """The values given (an option not given is None and left out, so the reader's default holds)."""
    return {key: value for key, value in values.items() if value is not None}


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise SettingsError(f'--header "{text}": expected NAME:VALUE')
    return name.strip(), value.strip()
