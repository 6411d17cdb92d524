"""The workload presets as ``Workload`` objects: the presets' figures are data of the settings
(``exporter.settings.presets``, with their sources); this builds the requests' shape from them."""

from __future__ import annotations

from exporter.load.prompts import PromptBuilder, SimPromptBuilder
from exporter.load.workloads import IndependentLengths, Workload
from exporter.settings.lengths import LogNormal
from exporter.settings.presets import FOLLOWUP_PROMPT, PRESET_NAMES, PRESETS, SESSION_TURNS
from exporter.streams.request import Api


def preset(
    name: str,
    *,
    builder: PromptBuilder | None = None,
    api: Api = "chat",
    max_prompt_tokens: int | None = None,
    max_output_tokens: int | None = None,
) -> Workload:
    """The named preset as a ``Workload`` (exact simulator prompts unless another builder is given;
    filters override the preset's defaults)."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise ValueError(f'unknown workload preset "{name}"; valid: {", ".join(PRESET_NAMES)}')
    p = PRESETS[key]
    lengths = IndependentLengths(
        LogNormal(p.prompt_median, p.prompt_sigma), LogNormal(p.output_median, p.output_sigma)
    )
    followups = IndependentLengths(FOLLOWUP_PROMPT, lengths.output) if p.sessions else None
    return Workload(
        name=key,
        lengths=lengths,
        builder=builder or SimPromptBuilder(),
        api=api,
        max_prompt_tokens=max_prompt_tokens or p.max_prompt_tokens,
        max_output_tokens=max_output_tokens or p.max_output_tokens,
        description=p.description,
        turns=SESSION_TURNS if p.sessions else None,
        followup_lengths=followups,
    )
