"""llama.cpp's own server, the serving benchmark's strongest peer: built once, run on loopback.

The binary is built from the llama.cpp sources inside llama-cpp-python's sdist
(the same llama.cpp our llama.cpp engine runs), CPU only, with llama.cpp's
default (native) CPU flags, and cached outside the repository; the ``cuda``
variant adds llama.cpp's CUDA backend (for ``$LOCALLLM_CUDA_ARCHITECTURES``,
default 90), for the GPU benchmark's peer:

    python scripts/bench/llama_server.py [cuda]  # build it now (several minutes on 2 cores), print its path
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from common import PeerServer

CACHE = Path(os.environ.get("LOCALLLM_BENCH_CACHE", Path.home() / ".cache" / "localllm-bench"))


def _cmake_variant(variant: str) -> list[str]:
    if variant == "cuda":
        return ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={os.environ.get('LOCALLLM_CUDA_ARCHITECTURES', '90')}"]
    if variant != "cpu":
        raise ValueError(f"no llama-server variant {variant!r} (cpu or cuda)")
    return []


def binary(variant: str = "cpu") -> Path:
    """The cached llama-server of the installed llama-cpp-python's version (``variant`` cpu or cuda), built first
    if missing."""
    release = version("llama-cpp-python")
    extra = _cmake_variant(variant)
    folder = f"llama-server-{release}" if variant == "cpu" else f"{variant}-llama-server-{release}"
    target = CACHE / folder / "llama-server"
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={release}", "-d", str(work)], check=True)
        with tarfile.open(next(work.glob("llama_cpp_python-*.tar.gz"))) as sdist:
            sdist.extractall(work, filter="data")
        sources = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = work / "build"
        subprocess.run(["cmake", "-S", str(sources), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                        "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                        "-DBUILD_SHARED_LIBS=OFF", *extra], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                       check=True, stdout=subprocess.DEVNULL)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(build / "bin" / "llama-server", partial)
        partial.replace(target)  # never a half-copied binary under the final name
    return target


class LlamaServer(PeerServer):
    """``llama-server -np N`` on a loopback port."""

    def __init__(self, model: Path, threads: int, parallel: int, ctx_per_seq: int, port: int,
                 extra: Sequence[str] = (), variant: str = "cpu") -> None:
        cmd = [str(binary(variant)), "-m", str(model), "-t", str(threads), "-tb", str(threads), "-np", str(parallel),
               "-c", str(ctx_per_seq * parallel), "--host", "127.0.0.1", "--port", str(port), "--no-webui", *extra]
        super().__init__("llama-server", cmd, f"http://127.0.0.1:{port}", "/health")


if __name__ == "__main__":
    print(binary(*sys.argv[1:2]))
