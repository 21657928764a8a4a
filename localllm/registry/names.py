"""Model names: ``[host/][namespace/]model[:tag]``, parsed and validated in one place.

A name becomes a path inside the store (``manifests/host/namespace/model/tag``),
so every part is checked against a strict character set: nothing that parses
can contain a path separator, start with a dot, or hold ``..``. The rules follow
Ollama's (``types/model/name.go``) so that a store shared with Ollama agrees on
which names exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
HUGGINGFACE_HOST = "hf.co"
_HUGGINGFACE_ALIASES = {"hf.co", "huggingface.co"}

MAX_PART_LENGTH = 128
MAX_NAME_LENGTH = 350

_PART_PATTERNS = {
    "host": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(:[0-9]{1,5})?"),
    "namespace": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*"),
    "model": re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*"),
    "tag": re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*"),
}
_PART_RULES = {
    "host": "letters, digits, '.', '-', '_' and an optional :port",
    "namespace": "letters, digits, '-' and '_' (no '.')",
    "model": "letters, digits, '.', '-' and '_', not starting with '.' or '-'",
    "tag": "letters, digits, '.', '-' and '_', not starting with '.' or '-'",
}


class InvalidName(ValueError):
    """A model name that cannot be used; the message names the problem."""


def _check_part(text: str, kind: str, value: str) -> None:
    if not value:
        raise InvalidName(f"invalid model name {text!r}: empty {kind}")
    if len(value) > MAX_PART_LENGTH:
        raise InvalidName(f"invalid model name {text!r}: {kind} longer than {MAX_PART_LENGTH} characters")
    if ".." in value:
        raise InvalidName(f"invalid model name {text!r}: '..' is not allowed")
    if not _PART_PATTERNS[kind].fullmatch(value):
        raise InvalidName(f"invalid model name {text!r}: {kind} {value!r} may only contain {_PART_RULES[kind]}")


@dataclass(frozen=True)
class ModelName:
    """A fully qualified model name; build it with :meth:`parse`."""

    host: str
    namespace: str
    model: str
    tag: str

    def __post_init__(self) -> None:
        text = f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        for kind in ("host", "namespace", "model", "tag"):
            _check_part(text, kind, getattr(self, kind))

    @classmethod
    def parse(cls, text: str) -> ModelName:
        """Parse ``[host/][namespace/]model[:tag]``; missing parts get the defaults.

        ``hf.co/<org>/<repo>[:<quant>]`` (or ``huggingface.co/...``) names a
        Hugging Face GGUF repository; its tag selects the quantization.
        """
        if not isinstance(text, str):
            raise InvalidName(f"invalid model name {text!r}: expected a string")
        stripped = text.strip()
        if not stripped:
            raise InvalidName("invalid model name '': the name is empty")
        if len(stripped) > MAX_NAME_LENGTH:
            raise InvalidName(f"invalid model name {stripped[:40]!r}...: longer than {MAX_NAME_LENGTH} characters")
        if "://" in stripped:
            raise InvalidName(f"invalid model name {text!r}: a URL is not a model name")
        if "\\" in stripped or stripped.startswith("/"):
            raise InvalidName(f"invalid model name {text!r}: paths are not model names")
        path, tag = stripped, DEFAULT_TAG
        last_slash = stripped.rfind("/")
        colon = stripped.rfind(":")
        if colon > last_slash:
            path, tag = stripped[:colon], stripped[colon + 1 :]
            if not tag:
                raise InvalidName(f"invalid model name {text!r}: empty tag after ':'")
        parts = path.split("/")
        if len(parts) > 3:
            raise InvalidName(f"invalid model name {text!r}: use [host/][namespace/]model[:tag]")
        host, namespace = DEFAULT_HOST, DEFAULT_NAMESPACE
        if len(parts) == 3:
            host, namespace, model = parts
        elif len(parts) == 2:
            namespace, model = parts
        else:
            (model,) = parts
        if host.lower() in _HUGGINGFACE_ALIASES:
            host = HUGGINGFACE_HOST
        return cls(host=host, namespace=namespace, model=model, tag=tag)

    @property
    def is_huggingface(self) -> bool:
        return self.host == HUGGINGFACE_HOST

    @property
    def display(self) -> str:
        """The short form Ollama shows: default host and namespace dropped, tag kept."""
        if self.host == DEFAULT_HOST and self.namespace == DEFAULT_NAMESPACE:
            return f"{self.model}:{self.tag}"
        if self.host == DEFAULT_HOST:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def full(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    def manifest_path(self, root: Path) -> Path:
        """Where this name's manifest lives under a store root (Ollama's layout)."""
        return Path(root) / "manifests" / self.host / self.namespace / self.model / self.tag

    def __str__(self) -> str:
        return self.display


def looks_like_path(reference: str) -> bool:
    """True when a FROM/ADAPTER/``run`` argument names a file rather than a model."""
    return reference.startswith(("/", "./", "../", "~")) or reference.lower().endswith(".gguf")


def name_for_file(path: Path) -> ModelName:
    """The name ``localllm run ./model.gguf`` registers a file under: its stem, lowercased, made valid.

    ``SmolLM2-135M-Instruct.Q4_1.gguf`` becomes ``smollm2-135m-instruct.q4_1:latest``.
    """
    stem = path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
    model = re.sub(r"\.{2,}", ".", re.sub(r"[^a-z0-9._-]+", "-", stem.lower())).lstrip(".-")[:MAX_PART_LENGTH]
    return ModelName(host=DEFAULT_HOST, namespace=DEFAULT_NAMESPACE, model=model or "model", tag=DEFAULT_TAG)
