"""Tests of exporter.engine.catalogue: the name tables, detection of the engine kind, explicit kinds."""

from __future__ import annotations

import pytest

from exporter.engine.catalogue import (
    ENGINES,
    GATEWAY_CATALOGUE,
    GATEWAYS,
    SIGNAL_TYPES,
    VALID_GATEWAY_KINDS,
    VALID_KINDS,
    Signal,
    Source,
    UnknownEngineError,
    detect_kind,
    families_for,
    family_key,
)
from exporter.engine.snapshot import index_families
from exporter.settings.target import ENGINE_KINDS, GATEWAY_KINDS
from tests.engine import fixtures


def present(text: str) -> list[str]:
    return [family.name for families in index_families(text).values() for family in families]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (fixtures.VLLM_V1, "vllm"),
        (fixtures.VLLM_V0, "vllm"),
        (fixtures.VLLM_0_13, "vllm"),
        (fixtures.SGLANG, "sglang"),
        (fixtures.SGLANG_ROUTER, "sglang"),
        (fixtures.SGLANG_OLD, "sglang"),
        (fixtures.TGI, "tgi"),
        (fixtures.LLAMACPP, "llamacpp"),
    ],
)
def test_kind_is_detected_from_the_families_present(text: str, kind: str) -> None:
    assert detect_kind(present(text)).kind == kind


def test_detection_compares_names_with_and_without_total() -> None:
    # The parser may hand over "vllm:prompt_tokens" (counter, _total stripped) or the full name.
    assert detect_kind(["vllm:prompt_tokens"]).kind == "vllm"
    assert detect_kind(["vllm:prompt_tokens_total"]).kind == "vllm"
    assert family_key("vllm:prompt_tokens_total") == family_key("vllm:prompt_tokens")


def test_detection_prefers_the_engine_with_more_matches() -> None:
    assert (
        detect_kind(["vllm:num_requests_waiting", "vllm:prompt_tokens", "sglang:token_usage"]).kind == "vllm"
    )


def test_a_tie_between_engines_is_an_error_naming_both() -> None:
    with pytest.raises(UnknownEngineError, match=r"several engines equally \(sglang, vllm\)"):
        detect_kind(["vllm:num_requests_waiting", "sglang:token_usage"])


def test_no_engine_metrics_is_an_error_naming_the_prefixes() -> None:
    with pytest.raises(
        UnknownEngineError, match=r"looked for prefixes vllm:, sglang:, sglang_, tgi_, llamacpp:\)"
    ):
        detect_kind(["process_cpu_seconds_total", "python_info"])


@pytest.mark.parametrize("text", [fixtures.LLM_D_EPP, fixtures.INFERENCE_OBJECTIVE])
def test_a_gateway_is_detected_among_gateways_and_is_no_engine(text: str) -> None:
    assert GATEWAY_CATALOGUE.detect(present(text)).kind == "llm-d-epp"
    # The engine scrape must not mistake the gateway's page for an engine, nor the reverse.
    with pytest.raises(UnknownEngineError, match="no known engine metrics"):
        detect_kind(present(text))
    with pytest.raises(UnknownEngineError, match="no known gateway metrics"):
        GATEWAY_CATALOGUE.detect(present(fixtures.VLLM_0_13))


def test_unknown_gateway_kind_names_the_valid_ones() -> None:
    with pytest.raises(UnknownEngineError) as info:
        GATEWAY_CATALOGUE.families_for("epp")
    assert str(info.value) == 'unknown gateway kind "epp"; valid: auto, llm-d-epp'
    assert VALID_GATEWAY_KINDS == GATEWAY_CATALOGUE.valid_kinds == ("auto", "llm-d-epp") == GATEWAY_KINDS


def test_explicit_kind_and_unknown_kind_message() -> None:
    assert families_for("tgi").prefixes == ("tgi_",)
    assert families_for("llamacpp").kind == "llamacpp"
    with pytest.raises(UnknownEngineError) as info:
        families_for("vlm")
    assert str(info.value) == 'unknown engine kind "vlm"; valid: auto, llamacpp, sglang, tgi, vllm'
    assert VALID_KINDS == ("auto", "llamacpp", "sglang", "tgi", "vllm") == ENGINE_KINDS


def test_every_table_uses_its_prefixes_and_known_signals() -> None:
    for kind, table in {**ENGINES, **GATEWAYS}.items():
        assert table.kind == kind
        for signal, source in table.sources.items():
            assert signal in SIGNAL_TYPES
            assert all(name.startswith(table.prefixes) for name in source.names), (kind, signal)


def test_every_sglang_name_is_tried_in_both_spellings_colon_first() -> None:
    for signal, source in ENGINES["sglang"].sources.items():
        colon = [name for name in source.names if name.startswith("sglang:")]
        assert list(source.names) == [n for name in colon for n in (name, name.replace(":", "_", 1))], signal


def test_renamed_families_list_the_new_name_first() -> None:
    vllm = ENGINES["vllm"].sources
    assert vllm[Signal.KV_CACHE_USAGE].names == ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert vllm[Signal.SERVER_ITL_SECONDS].names == (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    )
    assert (
        ENGINES["sglang"].sources[Signal.SERVER_ITL_SECONDS].names[0] == "sglang:inter_token_latency_seconds"
    )
    # vLLM 0.13 removed time_per_output_token_seconds; its per-request TPOT is a signal of its own.
    assert vllm[Signal.SERVER_TPOT_SECONDS].names == ("vllm:request_time_per_output_token_seconds",)
    epp = GATEWAYS["llm-d-epp"].sources
    assert epp[Signal.SERVER_E2E_SECONDS].names == (
        "llm_d_epp_request_duration_seconds",
        "inference_objective_request_duration_seconds",
    )


def test_a_source_needs_a_name() -> None:
    with pytest.raises(ValueError, match="at least one metric name"):
        Source(())
