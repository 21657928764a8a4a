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
from ..templates.renderers import built_in_renderer
from ..templates.families import ChatFormat, UnknownFormat, detect_format, format_named
from ..templates.thinking import ThinkingTags, go_thinking_tags, jinja_thinking_tags
from ..gguf import GGUFFile, InvalidGGUF, SkippedArray, read_gguf
from .links import LinkedFileError
from .names import ModelName
from .ollama_compat import TranslatedFiles, carries_audio, carries_vision, cached, translate, variant_of
from .projector import InvalidProjector, read_projector
from .requires import check_requires
from .store import (
    CONFIG_MEDIA_TYPE, MEDIA_ADAPTER, MEDIA_LICENSE, MEDIA_MESSAGES, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_PROJECTOR,
    MEDIA_SYSTEM, MEDIA_TEMPLATE, CorruptManifest, Store, build_manifest, layer
)

# Arrays longer than this (tokenizer vocabularies) are not decoded for show/list.
SUMMARY_ARRAY_LIMIT = 1024
# /api/show with verbose decodes arrays while their items in all stay within this (Gemma 3's vocabulary
# arrays hold 786,432); the rest are null, as without verbose.
VERBOSE_ARRAY_ITEMS = 1 << 20


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
    ollama_format: str | None = None  # the Ollama layout the model file is in (ollama_compat.py), None: llama.cpp's
    translated: TranslatedFiles | None = None  # that file in llama.cpp's layout, once made

    @property
    def model_digest(self) -> str:
        """The digest of the model blob (the manifest's last model layer)."""
        return [d for d in self.manifest["layers"] if d.get("mediaType") == MEDIA_MODEL][-1]["digest"]

    @property
    def run_path(self) -> Path:
        """The file a runner loads: the blob, or its translation for an Ollama-format file."""
        return self.translated.model if self.translated else self.model_path

    @property
    def run_projector(self) -> Path | None:
        """The projector a runner loads: the projector layer, else the encoder split out of the model file."""
        if self.projectors:
            return self.projectors[0]
        return self.translated.projector if self.translated else None

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
        parser, renderer = self.format_names
        if self.chat_format.calls and ("tools" in template or ".Tools" in template or parser
                                       or built_in_renderer(renderer)):
            caps.append("tools")
        if self.thinking_tags:
            caps.append("thinking")
        if self.vision:
            caps.append("vision")
        if self.audio:
            caps.append("audio")
        return caps

    @property
    def format_names(self) -> tuple[str, str]:
        """The Modelfile's ``PARSER`` and ``RENDERER`` names (Ollama's ``parser``/``renderer``), "" when unset."""
        return tuple(v if isinstance(v := self.config.get(key), str) else "" for key in ("parser", "renderer"))

    @property
    def chat_format(self) -> ChatFormat:
        """How this model writes thinking and tool calls: the Modelfile's PARSER, else its RENDERER's
        format, else what the architecture and template show."""
        parser, renderer = self.format_names
        for name, instruction in ((parser, "PARSER"), (renderer, "RENDERER")):
            if name:
                try:
                    return format_named(name, instruction)
                except UnknownFormat:  # create refuses these; a store written by a newer Ollama may hold one
                    continue
        return detect_format(self.gguf.architecture, self.template or self.chat_template or "")

    @property
    def vision(self) -> bool:
        """Whether the model takes images: it has a projector layer that reads as a vision projector, or its
        Ollama-format file carries an encoder that is split out as one."""
        if not self.projectors:
            return self.ollama_format is not None and carries_vision(self.gguf)
        try:
            return read_projector(self.projectors[0]).vision
        except (InvalidProjector, OSError):
            return False

    @property
    def audio(self) -> bool:
        """Whether the model hears: it has a projector layer with an audio encoder, or its Ollama-format file
        carries one that is split out into the projector."""
        if not self.projectors:
            return self.ollama_format is not None and carries_audio(self.gguf)
        try:
            return read_projector(self.projectors[0]).audio
        except (InvalidProjector, OSError):
            return False

    @property
    def thinking_tags(self) -> ThinkingTags | None:
        """The tags around this model's thinking; None if it cannot think. A format named by the
        Modelfile decides (Ollama's parsers know whether they think); a format found in the template
        uses its own tags when the template shows thinking (writes the opening tag, or as
        ``thinking.py`` finds it).

        With ``think`` on, an answer starts inside the block when the prompt
        already ends with the opening tag: ``tags.opened_by(prompt)``.
        """
        chat_format = self.chat_format
        if any(self.format_names) and chat_format.thinks is not None:
            return chat_format.thinking if chat_format.thinks else None
        found = self._template_thinking_tags()
        tags = chat_format.thinking
        if tags and (found or tags.opening in (self.template or self.chat_template or "")):
            return tags
        return found

    def _template_thinking_tags(self) -> ThinkingTags | None:
        if self.template:
            try:
                return go_thinking_tags(ollama_template(self.template))
            except TemplateError:  # create checks templates; a store written by others may still hold a bad one
                return None
        return jinja_thinking_tags(self.chat_template) if self.chat_template else None


def model_info(model: LocalModel, *, verbose: bool = False) -> dict[str, Any]:
    """Ollama's ``model_info``: GGUF metadata; long arrays are null unless ``verbose`` (then only those past
    VERBOSE_ARRAY_ITEMS items in all)."""
    gguf = read_gguf(model.model_path, keep_items=VERBOSE_ARRAY_ITEMS) if verbose else model.gguf
    info = {k: (None if isinstance(v, SkippedArray) else v) for k, v in gguf.metadata.items()}
    info["general.parameter_count"] = gguf.parameter_count
    return info


def projector_info(model: LocalModel) -> dict[str, Any] | None:
    """Ollama's ``projector_info``: the projector's GGUF metadata (long arrays null); None without one (or
    before the encoder inside an Ollama-format file has been split out)."""
    if model.run_projector is None:
        return None
    try:
        gguf = read_gguf(model.run_projector, skip_arrays_over=SUMMARY_ARRAY_LIMIT)
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
    model.ollama_format = variant_of(gguf)
    if model.ollama_format is not None:
        model.translated = cached(store, model.model_digest)
    return model


def translate_model(store: Store, model: LocalModel) -> None:
    """Make the llama.cpp-layout files of an Ollama-format model, once (slow the first time: the weights are
    copied); IncompatibleModel when the file cannot be translated. Nothing to do for other models."""
    if model.ollama_format is not None and model.translated is None:
        model.translated = translate(store, model.model_digest)


def config_blob(gguf: GGUFFile, layer_digests: list[str], requires: str | None = None,
                formats: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``application/vnd.docker.container.image.v1+json`` config Ollama writes for a GGUF model
    (``requires``, and ``formats``' ``parser``/``renderer``, only when set, as Ollama's ``omitempty``)."""
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
    config.update({key: value for key, value in (formats or {}).items() if value})
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
    requires: str | None = None, formats: dict[str, str] | None = None,
) -> str:
    """Write the config blob and manifest for a model blob already in the store.

    The model blob is read as GGUF first, so a corrupt file never gets a name.
    Returns the manifest digest (sha256 hex).
    """
    model_path = store.blob_path(model_digest)
    gguf = read_model_summary(model_path)
    layers = [layer(MEDIA_MODEL, model_digest, model_path.stat().st_size), *extra_layers]
    with store.hold(d["digest"] for d in layers):
        config = json.dumps(config_blob(gguf, [d["digest"] for d in layers], requires, formats)).encode()
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
