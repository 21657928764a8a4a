"""Every family Ollama's converter lays out its own way, as a tiny model written in both layouts
(support/arch_models.py): llama.cpp loads the upstream file, and the Ollama file translated for it holds the
upstream file's tensors byte for byte, its keys, and gives its logits in llama.cpp."""

from __future__ import annotations

import ctypes
import os
from functools import partial
from pathlib import Path

import llama_cpp as ll
import numpy as np
import pytest
from support import arch_models

from localllm.backends.llama_cpp import Batch, Context, Model, init_backend
from localllm.gguf import read_gguf
from localllm.registry.models import import_gguf
from localllm.registry.ollama_compat import translate, variant_of
from localllm.registry.store import Store

FAMILIES = {
    "lfm2": arch_models.lfm2,
    "qwen35": partial(arch_models.qwen_hybrid, arch="qwen35"),
    "qwen35moe": partial(arch_models.qwen_hybrid, arch="qwen35moe"),
    "qwen3next": partial(arch_models.qwen_hybrid, arch="qwen3next"),
    "mistral3": arch_models.mistral3,
    "glmocr": arch_models.glm_ocr,
    "glm4moelite": arch_models.glm4_moe_lite,
    "nemotron_h_moe": partial(arch_models.nemotron_h, arch="nemotron_h_moe"),
    "gemma4": arch_models.gemma4,
}
PROMPT = [257, 72, 105, 0, 33, 200]


def tensors_of(path: Path) -> dict[str, tuple[tuple[int, ...], int, bytes]]:
    header = read_gguf(path, skip_arrays_over=0)
    with open(path, "rb") as f:
        return {t.name: (t.shape, t.ggml_type, os.pread(f.fileno(), t.nbytes, t.offset)) for t in header.tensors}


def typed_fields(path: Path) -> dict[str, tuple]:
    """Every key's value with its GGUF type."""
    header = read_gguf(path)
    return {key: (value, header.value_types[key]) for key, value in header.metadata.items()}


def logits(path: Path) -> np.ndarray:
    """llama.cpp's logits after each token of PROMPT, computed on the CPU."""
    init_backend()
    model = Model(path)
    context = Context(model, n_ctx=64, n_seq_max=1, n_batch=16, n_threads=1)
    batch = Batch(16)
    try:
        for position, token in enumerate(PROMPT):
            batch.add(token, position, 0, True)
        assert context.decode(batch) == 0
        n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model.ptr))
        rows = []
        for row in range(len(PROMPT)):
            pointer = ll.llama_get_logits_ith(context.ptr, row)
            rows.append(np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), (n_vocab,)).copy())
        return np.stack(rows)
    finally:
        batch.close()
        context.close()
        model.close()


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory) -> Path:
    return arch_models.byte_vocabulary(tmp_path_factory.mktemp("vocab") / "bytes.gguf")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_translated_ollama_file_is_the_upstream_model(tmp_path, vocabulary, family):
    build = FAMILIES[family]
    upstream = build(tmp_path / "upstream.gguf", vocabulary, layout="upstream")
    theirs = build(tmp_path / "ollama.gguf", vocabulary, layout="ollama")
    assert variant_of(read_gguf(upstream, skip_arrays_over=16)) is None
    assert variant_of(read_gguf(theirs, skip_arrays_over=16)) == family
    store = Store(tmp_path / "models")
    digest, _ = import_gguf(store, theirs)
    files = translate(store, digest)
    assert tensors_of(files.model) == tensors_of(upstream)  # names, shapes, types and bytes
    translated, expected = typed_fields(files.model), typed_fields(upstream)
    assert {key: translated.get(key) for key in expected} == expected  # Ollama's own names may stay beside
    reference = logits(upstream)
    assert np.isfinite(reference).all() and reference.std() > 0.1
    assert np.array_equal(logits(files.model), reference)


def test_plain_nemotron_h_is_laid_out_alike_and_loads_as_it_is(tmp_path, vocabulary):
    upstream = arch_models.nemotron_h(tmp_path / "upstream.gguf", vocabulary, layout="upstream")
    theirs = arch_models.nemotron_h(tmp_path / "ollama.gguf", vocabulary, layout="ollama")
    assert upstream.read_bytes() == theirs.read_bytes()
    assert variant_of(read_gguf(theirs, skip_arrays_over=16)) is None
    assert np.isfinite(logits(theirs)).all()
