"""How to reach a one-shot run's target, from its options: URL, API, key, headers, body, TLS, timeouts."""

from __future__ import annotations

from typing import cast

from exporter.options.oneshot import OptionError, Options, json_object
from exporter.probe.target import APIS, Api, Secret, TargetSettings, Timeouts


def target_settings(options: Options, url: str) -> TargetSettings:
    """How to reach the target at ``url``."""
    timeouts = Timeouts(
        ttft=options["ttft_timeout"] or Timeouts.ttft,
        idle=options["idle_timeout"] or Timeouts.idle,
        total=options["total_timeout"] or Timeouts.total,
    )
    return TargetSettings(
        base_url=url,
        api=option_api(options),
        model=options["model"],
        api_key=_api_key(options),
        headers=tuple(_header(h) for h in options["header"] or ()),
        extra_body=tuple(_extra_body(options["extra_body"]).items()),
        timeouts=timeouts,
        verify_tls=not options["insecure"],
        ca_file=options["ca_file"],
    )


def option_api(options: Options) -> Api:
    """``--api``, chat by default."""
    api = options["api"] or "chat"
    if api not in APIS:
        raise OptionError(f'--api: unknown api "{api}"; valid: {", ".join(APIS)}')
    return cast(Api, api)


def _api_key(options: Options) -> Secret | None:
    try:
        if options["api_key_env"]:
            return Secret.from_env(options["api_key_env"])
        if options["api_key_file"]:
            return Secret.from_file(options["api_key_file"])
    except ValueError as exc:
        raise OptionError(str(exc)) from exc
    return None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise OptionError(f'--header "{text}": expected NAME:VALUE')
    return name.strip(), value.strip()


def _extra_body(text: str | dict[str, object] | None) -> dict[str, object]:
    return {} if text is None else json_object(text, "--extra-body")
