"""The CUDA build of the llama.cpp engine compiles (opt-in: ``LOCALLLM_TEST_CUDA_BUILD=1``).

It takes long and nothing on a machine without an NVIDIA driver can run it, so
it is not part of the default run; ``support.engine_builds`` builds it once
into the test cache with nvcc, and this checks that the CUDA backend is in it.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from support.engine_builds import EngineBuildUnavailable, build_seconds, cuda_site

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(4 * 3600),
    pytest.mark.skipif(os.environ.get("LOCALLLM_TEST_CUDA_BUILD") != "1",
                       reason="the CUDA build is opt-in: LOCALLLM_TEST_CUDA_BUILD=1"),
]


def test_the_cuda_build_has_ggmls_cuda_backend():
    try:
        site = cuda_site()
    except EngineBuildUnavailable as exc:
        pytest.skip(str(exc))
    (library,) = (site / "llama_cpp" / "lib").glob("libggml-cuda.so*")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout
    assert "ggml_backend_cuda_reg" in symbols
    print(f"CUDA build: {build_seconds('cuda'):.0f} s")
