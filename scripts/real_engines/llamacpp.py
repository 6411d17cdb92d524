"""llama.cpp's ``llama-server``, built from the sources inside the PyPI sdist of ``llama-cpp-python``.

PyPI is the one registry this project can count on, and the sdist carries a pinned llama.cpp tree
(``vendor/llama.cpp``). Set-up (7-9 minutes on 2 cores, once per version): download the sdist,
delete the tree's ``.git`` submodule pointer (without it ninja loops on "build.ninja still dirty"),
configure without curl, OpenSSL, the web UI (its prebuilt download needs the internet), tests and
examples, build only the ``llama-server`` target (a static binary, ~15 MB), then write the model
(a random-weight Llama GGUF, ``gguf_model.py``) and drop the sources. What stays in the cache folder:
``bin/llama-server``, ``vocab-phi-3.gguf`` (the tokenizer, which the vLLM model shares), ``models/``.

Behaviour the tests rely on (llama.cpp's, not ours): ``/v1/completions`` sends usage in its final chunk
even without ``include_usage``; ``min_tokens`` is ignored, ``ignore_eos`` + ``max_tokens`` fix the output
length; the prompt cache is on (our prompts start with a unique prefix); idle keep-alive connections are
closed after 5 s; ``/metrics`` (``--metrics``) has ``llamacpp:*`` counters and gauges, no histograms.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from scripts.real_engines.cache import cache_root, ensure_built, read_ready, step

LLAMA_CPP_PYTHON = "0.3.36"
VOCAB = "ggml-vocab-phi-3.gguf"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
PARALLEL_SLOTS = 8
SLOT_CONTEXT = 2048


@dataclass(frozen=True)
class ModelSize:
    """A random-weight model: hidden size and layers (parameters are mostly the 32k-token embeddings)."""

    name: str
    embd: int
    layers: int


# ~20M parameters: about 500 tokens/s on one stream of a 2-core machine, prefill about 1500 tokens/s.
MODEL = ModelSize("llama-20m", 256, 4)


def folder() -> Path:
    """This version's cache folder."""
    return cache_root() / f"llamacpp-{LLAMA_CPP_PYTHON}"


def server_binary() -> Path:
    return folder() / "bin" / "llama-server"


def vocab_file() -> Path:
    return folder() / "vocab-phi-3.gguf"


def model_file() -> Path:
    return folder() / "models" / f"{MODEL.name}.gguf"


def ensure() -> Path:
    """Build llama-server and its model unless this version's folder is already built; returns it."""
    return ensure_built(folder(), _build)


def _build(target: Path) -> dict[str, str]:
    log, work = target / "setup.log", target / "work"
    work.mkdir()
    step(
        f"download the llama-cpp-python {LLAMA_CPP_PYTHON} sdist",
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "--dest", work, f"llama-cpp-python=={LLAMA_CPP_PYTHON}"],
        log,
    )  # fmt: skip
    source = _unpack(work)
    build = source / "build"
    step("configure llama.cpp", ["cmake", "-S", source, "-B", build, "-G", _generator(), *CMAKE_OPTIONS], log)
    jobs = str(os.cpu_count() or 2)
    step("build llama-server", ["cmake", "--build", build, "--target", "llama-server", "-j", jobs], log)
    (target / "bin").mkdir()
    shutil.copy2(build / "bin" / "llama-server", server_binary())
    shutil.copy2(source / "models" / VOCAB, vocab_file())
    (target / "models").mkdir()
    _write_model(source / "gguf-py", MODEL, log)
    shutil.rmtree(work)
    return {"llama_cpp_python": LLAMA_CPP_PYTHON, "server_version": _server_version()}


def _unpack(work: Path) -> Path:
    archive = next(work.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    archive.unlink()
    source = work / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    (source / ".git").unlink(missing_ok=True)  # a submodule pointer to a .git that is not there
    return source


def _generator() -> str:
    return "Ninja" if shutil.which("ninja") else "Unix Makefiles"


def _write_model(gguf_py: Path, size: ModelSize, log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(gguf_py)}
    script = Path(__file__).with_name("gguf_model.py")
    step(
        f"write the {size.name} model",
        [sys.executable, script, "--vocab", vocab_file(), "--out", model_file(),
         "--embd", str(size.embd), "--layers", str(size.layers)],
        log,
        env=env,
    )  # fmt: skip


def _server_version() -> str:
    done = subprocess.run(
        [server_binary(), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("version")]
    return lines[0].removeprefix("version:").strip() if lines else "unknown"


def recorded_version() -> str:
    """The llama.cpp build number and commit of the built server (``b1234 (abcdef0)``)."""
    return str(read_ready(folder()).get("server_version", "unknown"))


def server_command(port: int, slots: int = PARALLEL_SLOTS) -> list[str]:
    """The command line of a llama-server on 127.0.0.1:``port`` with metrics and continuous batching."""
    return [
        str(server_binary()),
        "--model", str(model_file()),
        "--alias", MODEL.name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--metrics",
        "--cont-batching",
        "--parallel", str(slots),
        "--ctx-size", str(slots * SLOT_CONTEXT),
    ]  # fmt: skip
