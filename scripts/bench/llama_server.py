"""llama.cpp's own server, the serving benchmark's strongest peer: built once, run on loopback; and our daemon
beside it on the same synthetic model (:func:`side_by_side`, for the speed benchmarks of model shapes).

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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import httpx
from common import PeerServer, generate_rates, prompt, start_daemon
from support.daemon import Daemon, free_port
from support.fixtures import written_atomically

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

    def rates(self, n_prompt: int, tokens: int) -> tuple[float, float]:
        """(prefill, decode) tokens/s of one greedy completion of a new ``n_prompt``-token prompt, as the server
        times them (its prompt cache off)."""
        body = {"prompt": prompt(n_prompt), "n_predict": tokens, "temperature": 0, "cache_prompt": False}
        answer = httpx.post(f"{self.url}/completion", json=body, timeout=3600)
        answer.raise_for_status()
        timings = answer.json()["timings"]
        return timings["prompt_per_second"], timings["predicted_per_second"]


def cached_model(name: str, write: Callable[[Path], object]) -> Path:
    """The synthetic model file ``name`` in the benchmark cache, written by ``write(path)`` first where missing
    (atomically: never a half-written model under the final name)."""
    path = CACHE / name
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        written_atomically(path, write)
    return path


@dataclass
class Pair:
    """Our daemon with the model loaded, and llama-server on the same file (None, ``server_error`` saying why, when
    it did not start)."""

    daemon: Daemon
    model: str
    engine: str
    engine_reason: str
    server: LlamaServer | None
    server_error: str | None


@contextmanager
def side_by_side(path: Path, name: str, threads: int, num_ctx: int, server_args: Sequence[str] = ()) -> Iterator[Pair]:
    """Our daemon (one stream of ``threads`` threads) with ``path`` created as ``name``, loaded and its weights
    touched, beside llama-server on the same file with the same threads and ``server_args``, both warmed by a
    short completion; both stopped on the way out, whatever happened. A llama-server that cannot be built or
    started (no build tools, no network for its sources) is recorded, not raised: its figures are not measured."""
    daemon = start_daemon(LOCALLLM_NUM_THREADS=str(threads), LOCALLLM_NUM_PARALLEL="1", LOCALLLM_MAX_LOADED_MODELS="1")
    server = None
    try:
        daemon.create(name, f"FROM {path}")
        generate_rates(daemon.url, name, 16, 4, num_ctx)  # the load, and the weights' first touch
        entry = next(m for m in httpx.get(f"{daemon.url}/api/ps").json()["models"] if m["name"] == f"{name}:latest")
        pair = Pair(daemon, name, entry["engine"], entry["engine_reason"], None, None)
        try:
            server = LlamaServer(path, threads, 1, num_ctx, free_port(), extra=server_args)
            server.wait_ready(600)
            server.rates(16, 4)
            pair.server = server
        except Exception as exc:  # noqa: BLE001 - no build tools or no network for its sources: not measured
            pair.server_error = str(exc)[:500]
        yield pair
    finally:
        daemon.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    print(binary(*sys.argv[1:2]))
