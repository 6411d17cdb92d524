"""``fluidity-exporter check-config``, and every config file checked into ``deploy/config/``."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from exporter.cli import main
from exporter.settings import load_config
from exporter.settings.targets import TARGET_KEYS

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "deploy" / "config").glob("*.y*ml"))


def test_configs_are_shipped() -> None:
    names = {path.name for path in SHIPPED}
    assert {"example.yaml", "minimal.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_is_valid(path: Path) -> None:
    config = load_config(path, environ={})
    assert config.targets
    assert main(["check-config", str(path)]) == 0


def test_check_config_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(
        "targets:\n  - {name: a, url: 'http://h:1'}\nmodules:\n  m: {}\n  n: {}\n", encoding="utf-8"
    )
    assert main(["check-config", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: OK (1 target, 2 modules)\n"


def test_check_config_notes_an_slo_without_the_tier_the_burn_rules_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo in a tier name is a valid config, and every burn-rate alert of its targets is silent.
    path = tmp_path / "typo.yaml"
    path.write_text(
        "targets:\n  - {name: a, url: 'http://h:1', slo: typo}\n  - {name: b, url: 'http://h:2'}\n"
        "modules:\n  m: {}\n"
        "slos:\n  typo: {decode_tiers: {strict: 25ms, medum: 50ms, relaxed: 100ms}}\n",
        encoding="utf-8",
    )
    assert main(["check-config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: OK (2 targets, 1 module)"
    assert len(lines) == 2 and lines[1].startswith("  note: slos.typo.decode_tiers has no 'medium' tier")
    assert "(it has strict, medum, relaxed)" in lines[1] and "no burn alert covers a until" in lines[1]


def test_check_config_prints_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("targets:\n  - {name: 'a b', url: 'http://h:1', api_key: sk-123}\n", encoding="utf-8")
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"{path}: 2 problems",
        '  targets[0].name: bad name "a b"; use only letters, digits, _ . - (it becomes a label value)',
        "  targets[0].api_key: a literal key is not accepted (it would sit in the config file, its backups and "
        "diffs); write {env: NAME} or {file: PATH}",
    ]
    assert "sk-123" not in err


def test_check_config_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.yaml"
    assert main(["check-config", str(path)]) == 1
    assert "cannot read the config file" in capsys.readouterr().err


def test_check_config_several_files_fails_if_one_does(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("targets:\n  - {name: a, url: 'http://h:1'}\n", encoding="utf-8")
    bad.write_text("targets: []\n", encoding="utf-8")
    assert main(["check-config", str(good)]) == 0
    assert main(["check-config", str(good), str(bad)]) == 1


def test_a_binary_file_is_one_problem_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"targets:\n  - name: \xd0\x00\xff\n")
    assert main(["check-config", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: 1 problem",
        f"  {path}: not a UTF-8 text file (byte 0xd0 at offset 19); a config is YAML text",
    ]


def test_state_dir_must_be_a_directory_the_daemon_can_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("", encoding="utf-8")
    target = "targets:\n  - {name: a, url: 'http://h:1'}\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("global: {state_dir: afile}\n" + target, encoding="utf-8")
    assert main(["check-config", str(bad)]) == 1
    assert capsys.readouterr().err.splitlines()[1] == (
        f"  global.state_dir: {tmp_path / 'afile'} exists and is not a directory"
    )
    below_a_file = tmp_path / "below.yaml"
    below_a_file.write_text("global: {state_dir: afile/state}\n" + target, encoding="utf-8")
    assert main(["check-config", str(below_a_file)]) == 1
    assert "cannot be created" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text("global: {state_dir: new/state}\n" + target, encoding="utf-8")
    assert main(["check-config", str(good)]) == 0


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("state_dir", ["/proc/forbidden", "/proc"])
def test_state_dir_where_no_folder_can_be_made_is_refused_even_for_root(
    state_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Root passes os.access on /proc, so this was accepted, and run failed with "No such file or directory".
    config = tmp_path / "proc.yaml"
    config.write_text(f"global: {{state_dir: {state_dir}}}\ntargets:\n  - {{name: a, url: 'http://h:1'}}\n")
    assert main(["check-config", str(config)]) == 1
    assert "making a folder in /proc failed: No such file or directory" in capsys.readouterr().err


def test_the_state_dir_check_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    target = "targets:\n  - {name: a, url: 'http://h:1'}\n"
    for state_dir in ("state", "new/state"):
        load_config(f"global: {{state_dir: {tmp_path / state_dir}}}\n" + target)
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["state"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_shipped_config_run_as_it_is_probes_only_this_machine(path: Path) -> None:
    # A newcomer runs the example literally: it must not send load to a host outside the machine.
    config = load_config(path, environ={})
    urls = [target.url for target in config.targets]
    urls += [m.url for t in config.targets for m in (t.engine_metrics, t.gateway_metrics) if m is not None]
    for url in urls:
        assert urlsplit(url).hostname in {"127.0.0.1", "localhost", "::1"}, url


def test_the_example_documents_every_target_key() -> None:
    text = (REPO / "deploy" / "config" / "example.yaml").read_text(encoding="utf-8")
    for key in TARGET_KEYS:
        assert f" {key}:" in text, key
