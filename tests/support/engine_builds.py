"""GPU builds of the llama.cpp engine for the tests, each made once into the test cache.

Each is the same llama-cpp-python version as the one installed, built with
its GPU backend and ``-DGGML_RPC=on`` into
``<test cache>/<variant>-llama-cpp-<version>/site`` (``pip install --target``:
the environment's CPU build is untouched); a build that cannot be made raises
:class:`EngineBuildUnavailable` saying why (a test's skip reason).

``vulkan``: no machine here has a GPU, but Mesa's software Vulkan driver
(``llvmpipe``, Debian's ``mesa-vulkan-drivers``) is a real ggml GPU backend: a
Vulkan build offloads layers to it, with device buffers, a device memory report
and its own arithmetic. What the build needs is installed through apt (root
only). Debian 12's Vulkan headers (1.3.239) lack ``vk::LayerSettingEXT``, which
ggml-vulkan uses: newer ones (Debian 13's ``libvulkan-dev``) are fetched with a
private apt source list and unpacked into the cache, never installed.

``cuda``: needs ``nvcc``; compiled for ``$LOCALLLM_CUDA_ARCHITECTURES`` (default
90, one architecture keeps the build short) whether or not a GPU is there.

Run as a script to make a build ahead of the tests:
``python tests/support/engine_builds.py vulkan`` (or ``cuda``).
"""

from __future__ import annotations

import ctypes.util
import fcntl
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from support.fixtures import cache_dir  # noqa: E402

APT_PACKAGES = ("mesa-vulkan-drivers", "libvulkan1", "libvulkan-dev", "glslc", "spirv-headers")
HEADERS_SUITE = "trixie"  # Debian 13: Vulkan headers with vk::LayerSettingEXT
LLVMPIPE_ICD = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")


class EngineBuildUnavailable(RuntimeError):
    """A GPU build cannot be made or run on this machine; the message says why (a test's skip reason)."""


def build_dir(variant: str) -> Path:
    return cache_dir() / f"{variant}-llama-cpp-{importlib.metadata.version('llama_cpp_python')}"


def vulkan_site() -> Path:
    """The directory holding the Vulkan build's ``llama_cpp`` package, built on first use (minutes)."""
    return _cached_build("vulkan", _vulkan_cmake_args)


def cuda_site() -> Path:
    """The directory holding the CUDA build's ``llama_cpp`` package, built on first use (many minutes)."""
    return _cached_build("cuda", _cuda_cmake_args)


def build_seconds(variant: str) -> float:
    """How long the cached build of ``variant`` took."""
    return float((build_dir(variant) / "built").read_text().split()[2])


def _cached_build(variant: str, cmake_args: Callable[[Path], str]) -> Path:
    target = build_dir(variant)
    site = target / "site"
    if (target / "built").exists():
        return site
    target.mkdir(parents=True, exist_ok=True)
    with (target / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build, however many sessions ask at once
        if not (target / "built").exists():
            started = time.monotonic()
            _pip_build(target, site, cmake_args(target.parent))
            (target / "built").write_text(f"built in {time.monotonic() - started:.0f} s\n")
    return site


def vulkan_env(site: Path) -> dict[str, str]:
    """Environment for a daemon on the Vulkan build: its ``llama_cpp`` first on the path, Mesa's software device
    as the only Vulkan driver, and ggml told to list it (ggml skips CPU-type Vulkan devices by default)."""
    if not LLVMPIPE_ICD.exists():
        raise EngineBuildUnavailable(f"no software Vulkan driver ({LLVMPIPE_ICD} is missing: apt-get install "
                                     "mesa-vulkan-drivers)")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "VK_ICD_FILENAMES": str(LLVMPIPE_ICD), "GGML_VK_VISIBLE_DEVICES": "0"}


def cuda_env() -> dict[str, str]:
    """Environment for a daemon on a CUDA build made ahead, named by ``$LOCALLLM_CUDA_SITE`` (the directory
    holding its ``llama_cpp``, as ``scripts/device/cuda_check.sh build`` makes it), where a CUDA device is
    visible: its ``llama_cpp`` first on the path."""
    named = os.environ.get("LOCALLLM_CUDA_SITE")
    if not named:
        raise EngineBuildUnavailable("LOCALLLM_CUDA_SITE names no CUDA build of llama-cpp-python "
                                     "(scripts/device/cuda_check.sh build makes one)")
    site = Path(named)
    if not any((site / "llama_cpp" / "lib").glob("libggml-cuda.so*")):
        raise EngineBuildUnavailable(f"{site} holds no CUDA build of llama.cpp (no llama_cpp/lib/libggml-cuda.so)")
    if shutil.which("nvidia-smi") is None:
        raise EngineBuildUnavailable("no CUDA device visible (no nvidia-smi)")
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    if listed.returncode != 0 or "GPU 0" not in listed.stdout:
        raise EngineBuildUnavailable(f"no CUDA device visible (nvidia-smi -L: {(listed.stdout + listed.stderr)[-300:]})")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


def _vulkan_cmake_args(cache: Path) -> str:
    _install_packages()
    return f"-DGGML_VULKAN=on -DGGML_RPC=on -DVulkan_INCLUDE_DIR={_vulkan_headers(cache)}"


def _cuda_cmake_args(cache: Path) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise EngineBuildUnavailable("no nvcc on the PATH: the CUDA build needs the CUDA toolkit")
    architectures = os.environ.get("LOCALLLM_CUDA_ARCHITECTURES", "90")
    args = f"-DGGML_CUDA=on -DGGML_RPC=on -DCMAKE_CUDA_ARCHITECTURES={architectures}{_cublas_args(cache, nvcc)}"
    toolkit = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if ctypes.util.find_library("cuda") is None and not (toolkit / "lib64" / "stubs" / "libcuda.so").exists():
        args += " -DGGML_CUDA_NO_VMM=ON"  # no driver library to link: ggml's virtual memory pool needs it
    return args


def _cublas_args(cache: Path, nvcc: str) -> str:
    """cuBLAS, which ggml-cuda links, from NVIDIA's ``nvidia-cublas`` wheel (unpacked into the cache) when the
    toolkit has none (a compiler-only install)."""
    toolkit = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if any((toolkit / "lib64").glob("libcublas.so*")):
        return ""
    version = re.search(r"release (\d+)\.(\d+)", subprocess.run([nvcc, "--version"], capture_output=True,
                                                              text=True).stdout)
    if version is None:
        raise EngineBuildUnavailable(f"{nvcc} --version names no release")
    major, minor = version.groups()
    unpacked = cache / f"cublas-{major}.{minor}"
    if not (unpacked / "unpacked").exists():
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp,
                                   f"nvidia-cublas=={major}.{minor}.*"], capture_output=True, text=True)
            if done.returncode != 0:
                raise EngineBuildUnavailable(f"the toolkit has no cuBLAS and the nvidia-cublas {major}.{minor} wheel "
                                             f"could not be fetched: {done.stderr[-500:]}")
            with zipfile.ZipFile(next(Path(tmp).glob("*.whl"))) as wheel:
                wheel.extractall(unpacked)
        (unpacked / "unpacked").touch()
    root = next(unpacked.glob("nvidia/cu*"))
    return (f" -DCUDA_cublas_LIBRARY={root}/lib/libcublas.so.{major}"
            f" -DCUDA_cublasLt_LIBRARY={root}/lib/libcublasLt.so.{major}"
            f" -DCMAKE_CUDA_FLAGS=-I{root}/include -DCMAKE_CXX_FLAGS=-I{root}/include")


def _pip_build(target: Path, site: Path, cmake_args: str) -> None:
    log = target / "build.log"
    shutil.rmtree(site, ignore_errors=True)
    version = importlib.metadata.version("llama_cpp_python")
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-binary", "llama-cpp-python", "--no-cache-dir",
             "--target", str(site), f"llama-cpp-python=={version}", "-v"],
            env={**os.environ, "CMAKE_ARGS": cmake_args, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)},
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise EngineBuildUnavailable(f"the build of llama-cpp-python {version} with {cmake_args} failed "
                                     f"(log: {log}): {tail}")


def _install_packages() -> None:
    missing = [p for p in APT_PACKAGES if not _installed(p)]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise EngineBuildUnavailable(f"the Vulkan build needs {' '.join(missing)} (apt-get install, as root)")
    subprocess.run(["apt-get", "update", "-q"], capture_output=True)
    done = subprocess.run(["apt-get", "install", "-y", "-q", *missing], capture_output=True, text=True,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if done.returncode != 0:
        raise EngineBuildUnavailable(f"apt-get install {' '.join(missing)} failed: {done.stderr[-500:]}")


def _installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return done.returncode == 0 and "install ok installed" in done.stdout


def _vulkan_headers(cache: Path) -> Path:
    """An include directory whose ``vulkan/`` headers have ``vk::LayerSettingEXT``: the system's, or Debian 13's
    ``libvulkan-dev`` unpacked into the cache."""
    if _has_layer_settings(Path("/usr/include")):
        return Path("/usr/include")
    unpacked = cache / "vulkan-headers"
    if _has_layer_settings(unpacked / "usr" / "include"):
        return unpacked / "usr" / "include"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "lists" / "partial").mkdir(parents=True)
        (work / "cache" / "archives" / "partial").mkdir(parents=True)
        (work / "sources.list").write_text(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                                           f"http://deb.debian.org/debian {HEADERS_SUITE} main\n")
        private = ["-o", f"Dir::Etc::sourcelist={work / 'sources.list'}", "-o", "Dir::Etc::sourceparts=-",
                   "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}"]
        for step in (["update", "-q"], ["download", f"libvulkan-dev/{HEADERS_SUITE}"]):
            done = subprocess.run(["apt-get", *private, *step], cwd=work, capture_output=True, text=True)
            if done.returncode != 0:
                raise EngineBuildUnavailable(f"fetching Debian {HEADERS_SUITE}'s Vulkan headers failed (apt-get "
                                        f"{step[0]}): {done.stderr[-500:]}")
        deb = next(work.glob("libvulkan-dev_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    if not _has_layer_settings(unpacked / "usr" / "include"):
        raise EngineBuildUnavailable(f"Debian {HEADERS_SUITE}'s libvulkan-dev has no vk::LayerSettingEXT either")
    return unpacked / "usr" / "include"


def _has_layer_settings(include: Path) -> bool:
    handles = include / "vulkan" / "vulkan_structs.hpp"
    return handles.exists() and "struct LayerSettingEXT" in handles.read_text(errors="replace")


if __name__ == "__main__":
    variant = sys.argv[1] if len(sys.argv) > 1 else "vulkan"
    where = {"vulkan": vulkan_site, "cuda": cuda_site}[variant]()
    print(f"{variant} build of llama-cpp-python in {where} (built in {build_seconds(variant):.0f} s)")
