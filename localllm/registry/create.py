"""``create``: build a new model from a Modelfile, with layers stored as Ollama stores them.

The base (``FROM``) is an installed model, a name we can pull, or a GGUF file
on disk, which is linked where it is rather than copied (links.py); the
Modelfile's TEMPLATE, SYSTEM, PARAMETER, MESSAGE, ADAPTER and LICENSE lines
become layers that replace the base's; REQUIRES, PARSER and RENDERER go into the config.
Everything is checked (template parses, parameters typed, files are valid GGUF,
REQUIRES not newer than us) before a manifest is written, so a bad Modelfile
never leaves a half-made model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..templates.families import UnknownFormat, format_named
from ..templates.gotemplate import TemplateError
from ..templates.prompt import validate_model_template
from ..gguf import InvalidGGUF
from .links import LinkedFileError
from .modelfile import ModelfileError, convert_parameters, parse_modelfile
from .names import InvalidName, ModelName, looks_like_path
from .pull import Puller, PullError
from .quantize import QUANT_TYPES, QuantizeError, quantize_gguf
from .models import (
    import_gguf, json_layer, link_gguf, load_local_model, read_model_summary, register_model, text_layer,
)
from .projector import InvalidProjector, check_projector
from .requires import ModelTooNew, check_requires
from .store import (
    MEDIA_ADAPTER, MEDIA_LICENSE, MEDIA_MESSAGES, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_PROJECTOR, MEDIA_SYSTEM,
    MEDIA_TEMPLATE, CorruptManifest, ModelNotFound, Store, layer,
)

VALID_ROLES = {"system", "user", "assistant", "tool"}


class CreateError(ValueError):
    """A model cannot be created; the message names the instruction or file at fault."""


@dataclass
class CreateSpec:
    """What to build: the base and the layers that replace the base's."""

    from_: str
    base_dir: Path | None = None
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    license: list[str] | None = None
    adapters: list[str] = field(default_factory=list)
    quantize: str | None = None
    requires: str | None = None
    projectors: list[str] = field(default_factory=list)  # vision projector GGUF files (a second FROM)
    parser: str | None = None  # PARSER / RENDERER: chat format names (Ollama's), kept in the config
    renderer: str | None = None


def spec_from_modelfile(text: str, base_dir: Path | None, quantize: str | None = None) -> CreateSpec:
    """Parse and check a Modelfile; errors carry the line number."""
    try:
        modelfile = parse_modelfile(text)
        parameters = convert_parameters(modelfile.parameters)
    except ModelfileError as exc:
        raise CreateError(f"invalid Modelfile: {exc}") from None
    spec = CreateSpec(
        from_=modelfile.from_, base_dir=base_dir, template=modelfile.template, system=modelfile.system,
        parameters=parameters, messages=modelfile.messages or None, license=modelfile.license or None,
        adapters=list(modelfile.adapters), quantize=quantize, requires=modelfile.requires,
        projectors=list(modelfile.projectors), parser=modelfile.parser, renderer=modelfile.renderer,
    )
    check_spec(spec)
    return spec


def check_spec(spec: CreateSpec) -> None:
    """Refuse what would fail at chat time: a template we cannot render, an unknown role."""
    if spec.template is not None:
        try:
            validate_model_template(spec.template)
        except TemplateError as exc:
            raise CreateError(f"TEMPLATE cannot be used: {exc}") from None
    for message in spec.messages or []:
        if message.get("role") not in VALID_ROLES:
            raise CreateError(f"MESSAGE role {message.get('role')!r} is invalid; use system, user, assistant or tool")
    if spec.quantize is not None and spec.quantize.lower() not in QUANT_TYPES:
        raise CreateError(f"unknown quantization {spec.quantize!r}; choose one of {', '.join(sorted(QUANT_TYPES))}")
    if spec.requires is not None:
        _check_requires(spec.requires, "this Modelfile")
    for instruction, value in (("PARSER", spec.parser), ("RENDERER", spec.renderer)):
        if value:
            try:
                format_named(value, instruction)
            except UnknownFormat as exc:
                raise CreateError(str(exc)) from None
    for reference in spec.projectors:
        if not looks_like_path(reference):
            raise CreateError(f"FROM {reference}: a second FROM must name a projector GGUF file (./mmproj.gguf), "
                              "not a model")


def _check_requires(required: str, what: str) -> None:
    try:
        check_requires(required, what)
    except ModelTooNew as exc:
        raise CreateError(str(exc)) from None


def _local_path(reference: str, base_dir: Path | None) -> Path | None:
    """The file ``FROM``/``ADAPTER`` names, when it names a file rather than a model."""
    if not looks_like_path(reference):
        return None
    path = Path(reference).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def local_files(spec: CreateSpec) -> list[Path]:
    """The files on this machine that building ``spec`` would read (FROM and ADAPTER paths)."""
    references = [spec.from_, *spec.adapters, *spec.projectors]
    return [path for reference in references if (path := _local_path(reference, spec.base_dir)) is not None]


class Creator:
    """Runs ``create`` against one store; pulls a missing base through the puller."""

    def __init__(self, store: Store, puller: Puller) -> None:
        self.store = store
        self.puller = puller

    async def create(self, name: ModelName, spec: CreateSpec) -> AsyncIterator[dict[str, Any]]:
        """Yield Ollama's create status objects; raise CreateError on failure."""
        yield {"status": "parsing modelfile"}
        base_layers: list[dict[str, Any]] = []
        requires = spec.requires
        path = _local_path(spec.from_, spec.base_dir)
        linked: list[str] = []  # a link made for FROM goes again if no manifest ends up naming it
        try:
            if path is not None:
                model_layer = await self._file_layer(path, MEDIA_MODEL, "FROM")
                linked.append(model_layer["digest"])
                yield {"status": f"using file {path} in place as layer {model_layer['digest']}"}
                base_layers = [model_layer]
            else:
                async for status in self._base_layers(spec.from_, base_layers):
                    yield status
                requires = requires or self._base_requires(spec.from_)
            if requires:
                _check_requires(requires, f"FROM {spec.from_}")
            if spec.quantize:
                yield {"status": f"quantizing model to {spec.quantize.upper()}"}
                base_layers = [await self._quantized(base_layers, spec.quantize)] + [
                    entry for entry in base_layers if entry["mediaType"] != MEDIA_MODEL]
            layers = await self._layers(spec, base_layers)
            with self.store.hold(entry["digest"] for entry in layers):
                missing = [entry["digest"] for entry in layers if not self.store.has_blob(entry["digest"])]
                if missing:  # a concurrent delete of the base (or of a model sharing a layer) got there first
                    raise CreateError(f"layer {missing[0]} was removed while '{name.display}' was being created; "
                                      "create it again")
                for entry in layers:
                    yield {"status": f"using layer {entry['digest']}"}
                model_layer = next(entry for entry in layers if entry["mediaType"] == MEDIA_MODEL)
                others = [entry for entry in layers if entry is not model_layer]
                yield {"status": "writing manifest"}
                register_model(self.store, name, model_layer["digest"], others, requires,
                               self._formats(spec))
        finally:
            self.store.discard_unreferenced(linked)
        yield {"status": "success"}

    async def _base_layers(self, reference: str, out: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        """Layers of an installed (or else pulled) base model, appended to ``out``."""
        try:
            base_name = ModelName.parse(reference)
        except InvalidName as exc:
            raise CreateError(f"FROM {reference!r}: {exc}") from None
        try:
            manifest = self.store.read_manifest(base_name)
        except ModelNotFound:
            try:
                async for status in self.puller.pull(base_name):
                    yield status
            except PullError as exc:
                raise CreateError(f"FROM {reference!r}: not installed and pulling failed: {exc}") from None
            manifest = self.store.read_manifest(base_name)
        out.extend(manifest["layers"])

    def _formats(self, spec: CreateSpec) -> dict[str, str]:
        """PARSER and RENDERER for the config: the Modelfile's, else the base model's (as Ollama keeps them)."""
        base: dict[str, Any] = {}
        if _local_path(spec.from_, spec.base_dir) is None:
            try:
                base = load_local_model(self.store, ModelName.parse(spec.from_), verify_links=False).config
            except (CorruptManifest, LinkedFileError, InvalidGGUF, InvalidName, ModelNotFound):
                base = {}
        return {key: value for key in ("parser", "renderer")
                if isinstance(value := getattr(spec, key) or base.get(key), str) and value}

    def _base_requires(self, reference: str) -> str | None:
        """The REQUIRES of an installed base model, which a model built on it keeps (as Ollama does)."""
        try:
            return load_local_model(self.store, ModelName.parse(reference)).requires
        except (CorruptManifest, LinkedFileError, InvalidGGUF) as exc:
            raise CreateError(f"FROM {reference!r}: {exc}") from None

    async def _file_layer(self, path: Path, media_type: str, instruction: str) -> dict[str, Any]:
        """A GGUF file as a layer: FROM's is linked where it is (links.py), an ADAPTER's copied into the store."""
        if not path.is_file():
            raise CreateError(f"{instruction} {path}: no such file")
        store_file = link_gguf if media_type == MEDIA_MODEL else import_gguf
        try:
            digest, size = await asyncio.to_thread(store_file, self.store, path)
        except InvalidGGUF as exc:
            raise CreateError(f"{instruction} {path}: not a valid GGUF file: {exc}") from None
        except LinkedFileError as exc:
            raise CreateError(f"{instruction} {path}: {exc}") from None
        return layer(media_type, digest, size)

    async def _quantized(self, base_layers: list[dict[str, Any]], quant: str) -> dict[str, Any]:
        source = next((e for e in base_layers if e["mediaType"] == MEDIA_MODEL), None)
        if source is None:
            raise CreateError("nothing to quantize: the base has no model layer")
        target = self.store.temp_path("quantize")
        try:
            await asyncio.to_thread(quantize_gguf, self.store.blob_path(source["digest"]), target, quant)
            digest, size = await asyncio.to_thread(self.store.add_blob_file, target)
        except QuantizeError as exc:
            raise CreateError(str(exc)) from None
        finally:
            target.unlink(missing_ok=True)
        return layer(MEDIA_MODEL, digest, size)

    async def _layers(self, spec: CreateSpec, base_layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The base's layers with the spec's replacing those of the same kind."""
        replaced: dict[str, list[dict[str, Any]]] = {}
        if spec.template is not None:
            replaced[MEDIA_TEMPLATE] = [text_layer(self.store, MEDIA_TEMPLATE, spec.template)]
        if spec.system is not None:
            replaced[MEDIA_SYSTEM] = [text_layer(self.store, MEDIA_SYSTEM, spec.system)]
        if spec.parameters:
            merged = dict(self._base_parameters(base_layers))
            merged.update(spec.parameters)
            replaced[MEDIA_PARAMS] = [json_layer(self.store, MEDIA_PARAMS, merged)]
        if spec.messages is not None:
            replaced[MEDIA_MESSAGES] = [json_layer(self.store, MEDIA_MESSAGES, spec.messages)]
        if spec.license is not None:
            replaced[MEDIA_LICENSE] = [text_layer(self.store, MEDIA_LICENSE, text) for text in spec.license]
        if spec.adapters:
            adapters = []
            for reference in spec.adapters:
                path = _local_path(reference, spec.base_dir) or Path(reference)
                adapters.append(await self._file_layer(path, MEDIA_ADAPTER, "ADAPTER"))
            replaced[MEDIA_ADAPTER] = adapters
        if spec.projectors:
            replaced[MEDIA_PROJECTOR] = [await self._projector_layer(_local_path(p, spec.base_dir) or Path(p),
                                                                     base_layers) for p in spec.projectors]
        layers = [entry for entry in base_layers if entry["mediaType"] not in replaced]
        for entries in replaced.values():
            layers.extend(entries)
        return layers

    async def _projector_layer(self, path: Path, base_layers: list[dict[str, Any]]) -> dict[str, Any]:
        """A vision projector file as a layer, checked against the model it is for before it is copied."""
        if not path.is_file():
            raise CreateError(f"FROM {path}: no such file")
        model = next(entry for entry in base_layers if entry["mediaType"] == MEDIA_MODEL)
        try:
            summary = await asyncio.to_thread(read_model_summary, self.store.blob_path(model["digest"]))
            await asyncio.to_thread(check_projector, path, summary.arch_value("embedding_length"))
        except InvalidProjector as exc:
            raise CreateError(f"FROM {path}: cannot be used as a vision projector: {exc}") from None
        except InvalidGGUF as exc:
            raise CreateError(f"FROM {path}: the model it is for cannot be read: {exc}") from None
        with open(path, "rb") as src:
            digest, size = await asyncio.to_thread(self.store.add_blob, src)
        return layer(MEDIA_PROJECTOR, digest, size)

    def _base_parameters(self, base_layers: list[dict[str, Any]]) -> dict[str, Any]:
        for entry in base_layers:
            if entry["mediaType"] == MEDIA_PARAMS:
                return json.loads(self.store.blob_path(entry["digest"]).read_text("utf-8"))
        return {}
