"""Configuration: YAML and flags validated with messages that name the field and the valid options."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import build_parser
from exporter.cli.sim import SIM_COMMAND
from exporter.settings.problems import SettingsError
from exporter.sim.config import SimConfig, from_mapping, load_yaml, resolve


def sim_main(argv: list[str]) -> int:
    # The real parser and dispatch of `fluidity-exporter sim`, with only this command registered so the
    # test does not depend on the other commands' modules.
    args = build_parser({"sim": SIM_COMMAND}).parse_args(["sim", *argv])
    return SIM_COMMAND.run(args)


BAD_YAML = [
    (
        "preset: tinyy\n",
        'preset: unknown preset "tinyy"; valid: tiny, llama-3.1-8b-h100, llama-3.1-70b-4xh100, '
        "mistral-7b-a100",
    ),
    ("max_num_seq: 4\n", 'unknown key "max_num_seq"; valid: '),
    ("1: 2\nb: 3\n", 'unknown key "1"; valid: '),  # a number beside a name once raised a TypeError
    ("port: 70000\n", "port: expected an integer in 0..65535, got 70000"),
    ("max_num_seqs: 0\n", "max_num_seqs: expected an integer >= 1, got 0"),
    ("max_num_seqs: many\n", "max_num_seqs: expected an integer >= 1, got 'many'"),
    ("spec_acceptance: 1.5\n", "spec_acceptance: expected a number in 0..1, got 1.5"),
    ("chunked_prefill: maybe\n", "chunked_prefill: expected true or false, got 'maybe'"),
    ("fault_rates: {resett: 0.1}\n", 'fault_rates: unknown key "resett"; valid: http_500, http_503'),
    ("fault_rates: {reset: 2}\n", "fault_rates.reset: expected a number in 0..1.0, got 2"),
    ("fault_rates: {reset: 0.6, stall: 0.6}\n", "fault_rates: rates must sum to at most 1, got 1.2"),
    ("cost: {step_overhead: 1}\n", 'cost: unknown key "step_overhead"; valid: step_overhead_s, per_seq_s'),
    ("- a list\n", "expected a mapping at the top level"),
]


@pytest.mark.parametrize(("text", "message"), BAD_YAML)
def test_bad_yaml_is_rejected_with_a_message_naming_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError) as info:
        load_yaml(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_good_yaml_and_resolution(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(
        "preset: llama-3.1-8b-h100\nchunked_prefill: false\nmax_num_seqs: 32\ncost: {per_seq_s: 0}\n"
    )
    resolved = resolve(load_yaml(path))
    assert resolved.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert resolved.engine.max_num_seqs == 32 and not resolved.engine.chunked_prefill
    # Whole prefills need a budget that fits any prompt, as vLLM V0 sets it.
    assert resolved.engine.max_num_batched_tokens == resolved.engine.max_model_len
    assert resolved.cost.per_seq_s == 0


def test_unchunked_budget_smaller_than_context_is_rejected() -> None:
    config = from_mapping({"chunked_prefill": False, "max_num_batched_tokens": 512})
    with pytest.raises(SettingsError, match="max_num_batched_tokens: must be >= max_model_len"):
        resolve(config)


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_yaml(path) == SimConfig()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sim-preset", "huge"], 'preset: unknown preset "huge"; valid: tiny,'),
        (["--max-num-seqs", "0"], "max_num_seqs: expected an integer >= 1, got 0"),
        (["--fault-rate", "nope=0.1"], 'fault_rates: unknown key "nope"; valid: http_500'),
        (["--fault-rate", "reset=lots"], "fault_rates.reset: expected a number in 0..1.0, got 'lots'"),
        (["--config", "/nonexistent/sim.yaml"], "/nonexistent/sim.yaml:"),
    ],
)
def test_cli_bad_values_exit_2_with_a_clear_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert sim_main(argv) == 2
    assert message in capsys.readouterr().err
