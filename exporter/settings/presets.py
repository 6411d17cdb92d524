"""The Etalon paper's standard workload suite as named presets that reproduce each trace's lengths.

Each preset draws prompt and output lengths from independent log-normals (parameters: the median
``exp(mu)`` and ``sigma``), then keeps only requests within its filters, as the paper filters its traces
(prefill < 16K and decode < 1K by default; the trace's own context limit for AzureCode; BWB keeps its
long translations). Joint structure (e.g. long prompts with short answers in one request) is not
modelled: use a trace file (``exporter.settings.trace_files``) when it matters.

Statistics the presets reproduce (after filtering; ``generated`` computed from the parameters, the
tests check 5,000 samples against them) and where each figure comes from. Token counts are in the
tokenizer of the source (mostly Llama-2's); an *estimate* is a figure we chose where no published one
was at hand.

========================  ============================  ===========================  =====================
preset                    prompt: median / p90 / mean   output: median / p90 / mean  filters (prompt, out)
========================  ============================  ===========================  =====================
sharegpt                  1730 / 5696 / 2560            402 / 739 / 439              16384, 1024
lmsys                     40 / 164 / 73                 148 / 424 / 201              16384, 1024
mooncake                  8555 / 14067 / 8861           240 / 604 / 298              16384, 1024
azure-code                1418 / 4412 / 1961            8 / 29 / 13                  8192, 1024
arxiv-summarization       7800 / 12987 / 8237           228 / 405 / 252              16384, 1024
bwb                       2400 / 3306 / 2476            3599 / 4956 / 3712           16384, 8192
========================  ============================  ===========================  =====================

Sources and choices:

* ``sharegpt``: Sarathi-Serve (Agrawal et al., OSDI 2024), Table 3, openchat_sharegpt4: prefill median
  1730, p90 5696; decode median 415, p90 834 (figures as recalled from the table; check against the
  paper before quoting them). Prompt: log-normal fitted so that *after* the 16K filter its median and
  p90 are 1730 and 5696 (median 1750, sigma 0.957). Output: median 415, sigma ln(834/415)/1.2816 =
  0.54; the 1K filter lowers the generated p90 to 739 (estimate of the effect: the paper's p90 of 834
  suggests a lighter tail than a log-normal).
* ``lmsys`` (LMSys-Chat-1M): Zheng et al. (ICLR 2024), Table 1, report about 69.5 tokens per user
  prompt and 214.5 per response on average, per turn (as recalled; check before quoting). Spread is
  an *estimate*: sigma 1.1 (prompts) and 0.85 (responses) give those means with medians 40 and 150.
* ``mooncake`` (conversation trace, Mooncake FAST 2025, kvcache-ai/Mooncake traces, 12,031
  requests over an hour): average input 12,035 and output 343 tokens (as recalled from the trace's
  published statistics; check before quoting). Spread is an *estimate*: sigma 0.6 and 0.8 (medians
  10,000 and 250 before filtering); the 16K prefill filter drops about 20% of the long prompts (the
  generated mean is 8,861).
  *Sessions*: the trace is of conversations whose context grows turn by turn and is served from the
  prefix cache, so the preset sends multi-turn sessions by default: 1-5 turns (uniform; an
  *estimate*, the public trace has no session ids, only shared ``hash_ids`` blocks), the first prompt
  from the distribution above (the long context: a document, a history) and each follow-up a short
  new user message (``lmsys``'s prompt lengths: median 40 tokens) with mooncake's output lengths.
  ``--turns 1`` (``turns: 1``) sends single requests as before.
* ``azure-code`` (Azure LLM inference trace, code; Splitwise, Patel et al., ISCA 2024): Splitwise
  reports a median prompt of about 1,500 tokens for coding (as recalled); decodes are very short:
  the Etalon paper's suite uses ~8-token decodes (Splitwise's 2023 sample has a median near 13).
  Sigma 1.0 for both is an *estimate*; prompts are capped at the trace's 8K context.
* ``arxiv-summarization``: median prefill ~7.8K and decode ~228 (Etalon's suite); spreads from
  Sarathi-Serve Table 3 (arxiv_summarization p90 12985 prefill, 371 decode, as recalled; median prefill
  7059 there). Prompt fitted so that after the 16K filter median/p90 are 7800/12987 (median 8145,
  sigma 0.479); output median 228, sigma ln(371/208)/1.2816 = 0.45.
* ``bwb`` (Bilingual Web Book translation): ~2.4K prompt and ~3.6K output tokens (Etalon's suite).
  Spread is an *estimate* (sigma 0.25): Etalon's released 4K-filtered BWB file
  (project-etalon/etalon, data/processed_traces/bwb_stats_llama2_tokenizer_filtered_v2.csv) shows a
  narrow spread (prompt about 1000 +- 100, prefill/decode ratio about 0.65-0.7, the same ratio as
  2.4K/3.6K).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.lengths import LogNormal, Uniform


@dataclass(frozen=True)
class PresetStats:
    """What a preset generates after filtering (medians, p90s and means, in tokens)."""

    prompt_median: float
    prompt_p90: float
    prompt_mean: float
    output_median: float
    output_p90: float
    output_mean: float


@dataclass(frozen=True)
class Preset:
    """A preset's parameters, filters, documented statistics and a one-line description."""

    prompt_median: float
    prompt_sigma: float
    output_median: float
    output_sigma: float
    max_prompt_tokens: int
    max_output_tokens: int
    stats: PresetStats
    description: str
    sessions: bool = False  # multi-turn by default (see the mooncake notes above)


# Sessions of the presets that have them: turns per session and the new user message of each follow-up.
SESSION_TURNS = Uniform(1, 5)
FOLLOWUP_PROMPT = LogNormal(40, 1.1)  # lmsys's prompt lengths

PRESETS: dict[str, Preset] = {
    "sharegpt": Preset(
        1750, 0.957, 415, 0.54, 16384, 1024,
        PresetStats(1730, 5696, 2560, 402, 739, 439),
        "ShareGPT conversations (Sarathi-Serve's openchat_sharegpt4 statistics)",
    ),
    "lmsys": Preset(
        40, 1.1, 150, 0.85, 16384, 1024,
        PresetStats(40, 164, 73, 148, 424, 201),
        "LMSys-Chat-1M: short prompts, medium answers (means from the dataset paper; spread estimated)",
    ),
    "mooncake": Preset(
        10000, 0.6, 250, 0.8, 16384, 1024,
        PresetStats(8555, 14067, 8861, 240, 604, 298),
        "Mooncake conversation trace: long contexts, 1-5 turns per session (means from the trace; spread and turns estimated)",
        sessions=True,
    ),
    "azure-code": Preset(
        1500, 1.0, 8, 1.0, 8192, 1024,
        PresetStats(1418, 4412, 1961, 8, 29, 13),
        "Azure LLM inference trace, code: long prompts, ~8-token decodes",
    ),
    "arxiv-summarization": Preset(
        8145, 0.479, 228, 0.45, 16384, 1024,
        PresetStats(7800, 12987, 8237, 228, 405, 252),
        "Arxiv-Summarization: ~7.8K-token papers summarised in ~228 tokens",
    ),
    "bwb": Preset(
        2400, 0.25, 3600, 0.25, 16384, 8192,
        PresetStats(2400, 3306, 2476, 3599, 4956, 3712),
        "Bilingual Web Book translation: ~2.4K tokens in, ~3.6K out",
    ),
}  # fmt: skip
PRESET_NAMES = tuple(PRESETS)
PRESET_SESSIONS = {name: p.sessions for name, p in PRESETS.items()}  # as the options' readers take them
