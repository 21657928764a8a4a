"""The ctypes mirrors of ``kernels/llk.h``'s structs have the C sizes and field offsets.

A field added, moved or retyped on one side only would have the C code read the
model's tensors at the wrong places; the compiler says where each field really is.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from localllm.backends.native.lib import Layer, ModelParams, Tensor

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
MIRRORS = {"llk_tensor": Tensor, "llk_layer": Layer, "llk_model": ModelParams}


def _c_layout(tmp_path: Path) -> dict[str, int]:
    """``struct`` and ``struct.field`` → size and offset as the C compiler lays them out."""
    lines = [f'printf("{c} %zu\\n", sizeof({c}));' for c in MIRRORS]
    lines += [f'printf("{c}.{name} %zu\\n", offsetof({c}, {name}));'
              for c, mirror in MIRRORS.items() for name, _ in mirror._fields_]
    source = tmp_path / "layout.c"
    source.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "llk.h"\n'
                      "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n", encoding="utf-8")
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    binary = tmp_path / "layout"
    built = subprocess.run([compiler, "-std=gnu11", "-I", str(KERNELS), "-o", str(binary), str(source)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True, timeout=30).stdout
    return {key: int(value) for key, value in (line.split() for line in out.splitlines())}


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    return _c_layout(tmp_path_factory.mktemp("layout"))


@pytest.mark.parametrize("c_name", MIRRORS)
def test_mirror_matches_the_c_struct(c_layout: dict[str, int], c_name: str) -> None:
    mirror = MIRRORS[c_name]
    python = {c_name: ctypes.sizeof(mirror)} | {f"{c_name}.{name}": getattr(mirror, name).offset
                                                for name, _ in mirror._fields_}
    assert python == {key: value for key, value in c_layout.items() if key.split(".")[0] == c_name}
