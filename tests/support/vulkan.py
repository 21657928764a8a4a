"""A Vulkan build of the llama.cpp engine for the GPU tests, made once into the test cache.

No machine here has a GPU, but Mesa's software Vulkan driver (``llvmpipe``,
Debian's ``mesa-vulkan-drivers``) is a real ggml GPU backend: a Vulkan build of
llama-cpp-python offloads layers to it, with device buffers, a device memory
report and its own arithmetic. This module installs what the build needs
through apt (root only), builds the same llama-cpp-python version as the one
installed with ``-DGGML_VULKAN=on -DGGML_RPC=on`` into
``<test cache>/vulkan-llama-cpp-<version>/site`` (``pip install --target``:
the environment's CPU build is untouched), and says why when it cannot.

Debian 12's Vulkan headers (1.3.239) lack ``vk::LayerSettingEXT``, which
ggml-vulkan uses: newer ones (Debian 13's ``libvulkan-dev``) are fetched with a
private apt source list and unpacked into the cache, never installed.

Run as a script to make the build ahead of the tests:
``python tests/support/vulkan.py``.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from support.fixtures import cache_dir  # noqa: E402

APT_PACKAGES = ("mesa-vulkan-drivers", "libvulkan1", "libvulkan-dev", "glslc", "spirv-headers")
HEADERS_SUITE = "trixie"  # Debian 13: Vulkan headers with vk::LayerSettingEXT
LLVMPIPE_ICD = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")


class VulkanUnavailable(RuntimeError):
    """The Vulkan build cannot be made or run on this machine; the message says why (a test's skip reason)."""


def build_dir() -> Path:
    return cache_dir() / f"vulkan-llama-cpp-{importlib.metadata.version('llama_cpp_python')}"


def vulkan_site() -> Path:
    """The directory holding the Vulkan build's ``llama_cpp`` package, built on first use (minutes)."""
    target = build_dir()
    site = target / "site"
    if (target / "built").exists():
        return site
    target.mkdir(parents=True, exist_ok=True)
    with (target / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build, however many sessions ask at once
        if not (target / "built").exists():
            _build(target, site)
    return site


def vulkan_env(site: Path) -> dict[str, str]:
    """Environment for a daemon on the Vulkan build: its ``llama_cpp`` first on the path, Mesa's software device
    as the only Vulkan driver, and ggml told to list it (ggml skips CPU-type Vulkan devices by default)."""
    if not LLVMPIPE_ICD.exists():
        raise VulkanUnavailable(f"no software Vulkan driver ({LLVMPIPE_ICD} is missing: apt-get install "
                                "mesa-vulkan-drivers)")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "VK_ICD_FILENAMES": str(LLVMPIPE_ICD), "GGML_VK_VISIBLE_DEVICES": "0"}


def _build(target: Path, site: Path) -> None:
    started = time.monotonic()
    _install_packages()
    headers = _vulkan_headers(target.parent)
    log = target / "build.log"
    cmake_args = f"-DGGML_VULKAN=on -DGGML_RPC=on -DVulkan_INCLUDE_DIR={headers}"
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
        raise VulkanUnavailable(f"the Vulkan build of llama-cpp-python {version} failed (log: {log}): {tail}")
    (target / "built").write_text(f"built in {time.monotonic() - started:.0f} s\n")


def _install_packages() -> None:
    missing = [p for p in APT_PACKAGES if not _installed(p)]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise VulkanUnavailable(f"the Vulkan build needs {' '.join(missing)} (apt-get install, as root)")
    subprocess.run(["apt-get", "update", "-q"], capture_output=True)
    done = subprocess.run(["apt-get", "install", "-y", "-q", *missing], capture_output=True, text=True,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if done.returncode != 0:
        raise VulkanUnavailable(f"apt-get install {' '.join(missing)} failed: {done.stderr[-500:]}")


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
                raise VulkanUnavailable(f"fetching Debian {HEADERS_SUITE}'s Vulkan headers failed (apt-get "
                                        f"{step[0]}): {done.stderr[-500:]}")
        deb = next(work.glob("libvulkan-dev_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    if not _has_layer_settings(unpacked / "usr" / "include"):
        raise VulkanUnavailable(f"Debian {HEADERS_SUITE}'s libvulkan-dev has no vk::LayerSettingEXT either")
    return unpacked / "usr" / "include"


def _has_layer_settings(include: Path) -> bool:
    handles = include / "vulkan" / "vulkan_structs.hpp"
    return handles.exists() and "struct LayerSettingEXT" in handles.read_text(errors="replace")


if __name__ == "__main__":
    began = time.monotonic()
    print(f"Vulkan build of llama-cpp-python in {vulkan_site()} ({time.monotonic() - began:.0f} s)")
