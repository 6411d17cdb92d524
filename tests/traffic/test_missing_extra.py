"""``run`` with ``traffic:`` on an install without the ``traffic`` extra: one line naming the extra, exit
1, no traceback; the core install runs every other config (nothing else imports gRPC)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# grpc made unimportable in the child, as on a core install (sys.modules[name] = None blocks an import).
ENTRY = "import sys; sys.modules['grpc'] = None; from exporter.cli import main; sys.exit(main(sys.argv[1:]))"


def test_run_names_the_extra_when_grpc_is_missing(tmp_path: Path) -> None:
    config = tmp_path / "traffic.yaml"
    config.write_text('traffic: {ext_proc_address: "127.0.0.1:0"}\n')
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            ENTRY,
            "run",
            "--config.file",
            str(config),
            "--web.listen-address",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "pip install 'fluidity-exporter[traffic]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_daemon_and_the_exposition_import_without_grpc() -> None:
    code = "import sys; sys.modules['grpc'] = None; import exporter.app, exporter.exposition.traffic_stats"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
