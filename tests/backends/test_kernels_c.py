"""The kernels' SIMD levels against the scalar reference from C (tests/backends/kernels_check.c).

On this machine for its own levels; for AArch64 (NEON, with and without the dot product
instructions) by cross-compiling and running under qemu-user, where those are installed
(``apt install gcc-aarch64-linux-gnu qemu-user``): the Python suite cannot run on a CPU it is
not on, and NEON is the only SIMD path ARM laptops and boards get.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(str(p) for p in (ROOT / "kernels").glob("*.c"))
HARNESS = str(ROOT / "tests" / "backends" / "kernels_check.c")
FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-fno-math-errno"]


def _build(compiler: str, out: Path, *extra: str) -> Path:
    done = subprocess.run([compiler, *FLAGS, *extra, "-o", str(out), HARNESS, *SOURCES, "-lm", "-lpthread"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def _check(cmd: list[str], levels: int) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"levels checked up to {levels}, 0 failures" in done.stdout, done.stdout[-3000:]


def test_host_levels_agree_with_the_reference(tmp_path: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    from localllm.backends.native import kernels

    best = {name: level for level, name in kernels.ISA_NAMES.items()}[kernels.best_isa()]
    _check([str(_build(compiler, tmp_path / "check"))], best)


@pytest.mark.skipif(not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")),
                    reason="needs gcc-aarch64-linux-gnu and qemu-user to run the NEON kernels")
@pytest.mark.parametrize("cpu, levels", [("max", 5), ("cortex-a72", 4)], ids=["dotprod", "no-dotprod"])
def test_neon_levels_agree_with_the_reference(tmp_path: Path, cpu: str, levels: int) -> None:
    binary = _build("aarch64-linux-gnu-gcc", tmp_path / "check", "-static")
    _check(["qemu-aarch64", "-cpu", cpu, str(binary)], levels)
