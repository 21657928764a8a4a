"""One installed model resolved from its manifest, and how models get registered.

``load_local_model`` turns a name into everything ``/api/show`` and the runner
need (blob paths, template, parameters, GGUF metadata). ``register_model``
is the single place that writes a model's config blob and manifest, used by
pull and by imports of local GGUF files, so both produce the layout Ollama writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..backends.pooling import Pooling
from ..templates.gotemplate import TemplateError
from ..templates.prompt import ollama_template
from ..templates.thinking import ThinkingTags, go_thinking_tags, jinja_thinking_tags
from ..gguf import GGUFFile, InvalidGGUF, SkippedArray, read_gguf
from .links import LinkedFileError
from .names import ModelName
from .projector import InvalidProjector, read_projector
from .requires import check_requires
from .store import (
    CONFIG_MEDIA_TYPE, MEDIA_ADAPTER, MEDIA_LICENSE, MEDIA_MESSAGES, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_PROJECTOR,
    MEDIA_SYSTEM, MEDIA_TEMPLATE, CorruptManifest, Store, build_manifest, layer
)

# Arrays longer than this (tokenizer vocabularies) are not decoded for show/list.
SUMMARY_ARRAY_LIMIT = 1024


def human_number(count: int) -> str:
    """Ollama's parameter-size format: 134515008 -> "134.52M", 7000000000 -> "7B"."""
    for scale, suffix, decimals in ((1_000_000_000, "B", 1), (1_000_000, "M", 2)):
        if count >= scale:
            value = count / scale
            return f"{value:.0f}{suffix}" if value == math.floor(value) else f"{value:.{decimals}f}{suffix}"
    if count >= 1000:
        return f"{count / 1000:.0f}K"
    return str(count)


def model_details(gguf: GGUFFile) -> dict[str, Any]:
    """Ollama's ``details`` object for a GGUF model."""
    family = gguf.architecture or "unknown"
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": human_number(gguf.parameter_count),
        "quantization_level": gguf.quantization,
    }


@lru_cache(maxsize=32)
def _summary(path: str, size: int) -> GGUFFile:
    # Blobs are content-addressed and never change, so path + size is a safe cache key.
    return read_gguf(Path(path), skip_arrays_over=SUMMARY_ARRAY_LIMIT)


def read_model_summary(path: Path) -> GGUFFile:
    """The GGUF header of a model blob, with long arrays skipped; cached."""
    return _summary(str(path), path.stat().st_size)


@dataclass
class LocalModel:
    """An installed model: its manifest's layers resolved to paths and values."""

    name: ModelName
    manifest: dict[str, Any]
    digest: str  # sha256 hex of the manifest bytes
    model_path: Path
    gguf: GGUFFile  # header only; long arrays are SkippedArray
    config: dict[str, Any] = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    license: list[str] = field(default_factory=list)
    adapters: list[Path] = field(default_factory=list)
    projectors: list[Path] = field(default_factory=list)

    @property
    def details(self) -> dict[str, Any]:
        return model_details(self.gguf)

    @property
    def requires(self) -> str | None:
        """The oldest version that may run this model (a Modelfile's REQUIRES, kept in the config as Ollama does)."""
        value = self.config.get("requires")
        return value if isinstance(value, str) and value else None

    @property
    def linked_file(self) -> Path | None:
        """The user's file the weights are read from, when the model was registered without a copy."""
        return self.model_path.readlink() if self.model_path.is_symlink() else None

    def check_runnable(self) -> None:
        """Raise ModelTooNew when the model requires a newer localllm than this one."""
        if self.requires:
            check_requires(self.requires, f"model '{self.name.display}'")

    @property
    def size(self) -> int:
        return sum(d["size"] for d in [*self.manifest["layers"], self.manifest.get("config") or {"size": 0}])

    @property
    def chat_template(self) -> str | None:
        """The GGUF's own Jinja chat template, if it has one."""
        value = self.gguf.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def capabilities(self) -> list[str]:
        """What Ollama lists under ``capabilities`` for this model."""
        pooling = self.gguf.arch_value("pooling_type")
        caps = (["completion"] if pooling in (None, Pooling.NONE) else ["rerank"] if pooling == Pooling.RANK
                else ["embedding"])
        template = self.template or self.chat_template or ""
        if "tools" in template:
            caps.append("tools")
        if self.thinking_tags:
            caps.append("thinking")
        if self.vision:
            caps.append("vision")
        if self.audio:
            caps.append("audio")
        return caps

    @property
    def vision(self) -> bool:
        """Whether the model takes images: it has a projector layer that reads as a vision projector."""
        if not self.projectors:
            return False
        try:
            return read_projector(self.projectors[0]).vision
        except (InvalidProjector, OSError):
            return False

    @property
    def audio(self) -> bool:
        """Whether the model hears: it has a projector layer with an audio encoder."""
        if not self.projectors:
            return False
        try:
            return read_projector(self.projectors[0]).audio
        except (InvalidProjector, OSError):
            return False

    @property
    def thinking_tags(self) -> ThinkingTags | None:
        """The tags around this model's thinking, read from the template that applies; None if it cannot think.

        With ``think`` on, an answer starts inside the block when the prompt
        already ends with the opening tag: ``tags.opened_by(prompt)``.
        """
        if self.template:
            try:
                return go_thinking_tags(ollama_template(self.template))
            except TemplateError:  # create checks templates; a store written by others may still hold a bad one
                return None
        return jinja_thinking_tags(self.chat_template) if self.chat_template else None


def model_info(model: LocalModel, *, verbose: bool = False) -> dict[str, Any]:
    """Ollama's ``model_info``: GGUF metadata; long arrays are null unless ``verbose``."""
    gguf = read_gguf(model.model_path) if verbose else model.gguf
    info = {k: (None if isinstance(v, SkippedArray) else v) for k, v in gguf.metadata.items()}
    info["general.parameter_count"] = gguf.parameter_count
    return info


def projector_info(model: LocalModel) -> dict[str, Any] | None:
    """Ollama's ``projector_info``: the projector's GGUF metadata (long arrays null); None without one."""
    if not model.projectors:
        return None
    try:
        gguf = read_gguf(model.projectors[0], skip_arrays_over=SUMMARY_ARRAY_LIMIT)
    except (InvalidGGUF, OSError):
        return None
    return {k: (None if isinstance(v, SkippedArray) else v) for k, v in gguf.metadata.items()}


def load_local_model(store: Store, name: ModelName, *, verify_links: bool = True) -> LocalModel:
    """Resolve ``name`` to a LocalModel; ModelNotFound if it is not installed, LinkedFileError if
    a file it links vanished or changed (unless ``verify_links`` is off: deleting needs no check)."""
    manifest = store.read_manifest(name)
    digest = store.manifest_digest(name)
    layers = manifest["layers"]
    model_layers = [d for d in layers if d.get("mediaType") == MEDIA_MODEL]
    if not model_layers:
        raise CorruptManifest(f"manifest of '{name.display}' has no model layer")

    for descriptor in layers if verify_links else ():
        try:
            store.check_link(descriptor["digest"])
        except LinkedFileError as exc:
            raise LinkedFileError(f"model '{name.display}' cannot be used: {exc}; register the file again "
                                  f"(localllm create {name.display} -f Modelfile) or remove the model") from None

    def text(descriptor: dict[str, Any]) -> str:
        return store.blob_path(descriptor["digest"]).read_text(encoding="utf-8", errors="replace")

    def json_blob(descriptor: dict[str, Any]) -> Any:
        try:
            return json.loads(text(descriptor))
        except json.JSONDecodeError as exc:
            raise CorruptManifest(f"'{name.display}': layer {descriptor['digest']} is not valid JSON: {exc}") from None

    model_path = store.blob_path(model_layers[-1]["digest"])
    try:
        gguf = read_model_summary(model_path)
    except FileNotFoundError:
        raise CorruptManifest(f"'{name.display}': model blob {model_layers[-1]['digest']} is missing") from None
    model = LocalModel(name=name, manifest=manifest, digest=digest, model_path=model_path, gguf=gguf)
    if manifest.get("config") and store.has_blob(manifest["config"]["digest"]):
        config = json_blob(manifest["config"])
        model.config = config if isinstance(config, dict) else {}
    for descriptor in layers:
        media_type = descriptor.get("mediaType")
        if media_type == MEDIA_TEMPLATE:
            model.template = text(descriptor)
        elif media_type == MEDIA_SYSTEM:
            model.system = text(descriptor)
        elif media_type == MEDIA_PARAMS:
            params = json_blob(descriptor)
            model.parameters = params if isinstance(params, dict) else {}
        elif media_type == MEDIA_MESSAGES:
            messages = json_blob(descriptor)
            model.messages = messages if isinstance(messages, list) else []
        elif media_type == MEDIA_LICENSE:
            model.license.append(text(descriptor))
        elif media_type == MEDIA_ADAPTER:
            model.adapters.append(store.blob_path(descriptor["digest"]))
        elif media_type == MEDIA_PROJECTOR:
            model.projectors.append(store.blob_path(descriptor["digest"]))
    return model


def config_blob(gguf: GGUFFile, layer_digests: list[str], requires: str | None = None) -> dict[str, Any]:
    """The ``application/vnd.docker.container.image.v1+json`` config Ollama writes for a GGUF model
    (``requires`` only when set, as Ollama's ``omitempty``)."""
    details = model_details(gguf)
    config = {
        "model_format": "gguf",
        "model_family": details["family"],
        "model_families": details["families"],
        "model_type": details["parameter_size"],
        "file_type": details["quantization_level"],
    }
    if requires:
        config["requires"] = requires
    return config | {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": layer_digests}}


def text_layer(store: Store, media_type: str, content: str) -> dict[str, Any]:
    """Store a small text layer (template, system, license) and return its descriptor."""
    digest, size = store.add_blob_bytes(content.encode("utf-8"))
    return layer(media_type, digest, size)


def json_layer(store: Store, media_type: str, value: Any) -> dict[str, Any]:
    """Store a JSON layer (params, messages) and return its descriptor."""
    return text_layer(store, media_type, json.dumps(value))


def register_model(
    store: Store, name: ModelName, model_digest: str, extra_layers: Sequence[dict[str, Any]] = (),
    requires: str | None = None,
) -> str:
    """Write the config blob and manifest for a model blob already in the store.

    The model blob is read as GGUF first, so a corrupt file never gets a name.
    Returns the manifest digest (sha256 hex).
    """
    model_path = store.blob_path(model_digest)
    gguf = read_model_summary(model_path)
    layers = [layer(MEDIA_MODEL, model_digest, model_path.stat().st_size), *extra_layers]
    with store.hold(d["digest"] for d in layers):
        config = json.dumps(config_blob(gguf, [d["digest"] for d in layers], requires)).encode()
        config_digest, config_size = store.add_blob_bytes(config)
        manifest = build_manifest(layer(CONFIG_MEDIA_TYPE, config_digest, config_size), layers)
        return store.write_manifest(name, manifest)


def link_gguf(store: Store, path: Path) -> tuple[str, int]:
    """Register a local GGUF file as a model blob without copying it (see links.py); ``(digest, size)``.

    The file is validated with :func:`read_gguf` before it is hashed and linked.
    """
    read_gguf(path, skip_arrays_over=SUMMARY_ARRAY_LIMIT)
    return store.link_file(path)


def import_gguf(store: Store, path: Path) -> tuple[str, int]:
    """Copy a local GGUF file into the store as a model blob; returns ``(digest, size)``.

    The file is validated with :func:`read_gguf` before anything is copied.
    """
    read_gguf(path, skip_arrays_over=SUMMARY_ARRAY_LIMIT)
    with open(path, "rb") as src:
        digest, size = store.add_blob(src)
    try:
        read_model_summary(store.blob_path(digest))
    except InvalidGGUF:  # the file changed while we copied it
        store.blob_path(digest).unlink(missing_ok=True)
        raise
    return digest, size
