"""GGUF files in Ollama's own layout, translated into the layout llama.cpp loads.

Ollama's converter wrote some architectures its own way: other architecture
names (``gptoss`` for llama.cpp's ``gpt-oss``, ``olmo3`` for ``olmo2``, ...),
other key and tensor names, separate tensors llama.cpp wants fused, and the
vision (and audio) encoder inside the one GGUF where libmtmd loads it only as
a separate projector. Ollama, now on upstream llama-server, rewrites such
files in memory at every load (its ``llama/compat/``). We translate once
instead: :func:`plan` reads the header and says what the llama.cpp file (and
the projector split out of it) hold — every key with its type, every tensor
with the source bytes it is made of — and :func:`write` makes the file,
copying tensor data kernel-side (``copy_file_range``, a reflink where the
filesystem can) and converting only the few tensors that change.

The blob in the store is never changed: the translated files live in the
store's cache for derived files (:meth:`Store.translated_dir`), keyed by the
blob's digest, written in ``partial/`` and renamed into place whole.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..gguf import GGML_TYPES, MAGIC, GGUFFile, InvalidGGUF, SkippedArray, read_gguf
from .store import Store, _fsync_dir

log = logging.getLogger(__name__)

# GGUF metadata value types (gguf.py reads them all)
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
GGML_F32, GGML_F16 = 0, 1

#: Bumped when a translation changes, so files derived by an older one are made again.
TRANSLATION_VERSION = 3
MODEL_FILE, PROJECTOR_FILE = "model.gguf", "projector.gguf"


# A translation copies the whole header, so it reads every array: up to this many items in all (a 262k vocabulary's
# tokens, scores, types and merges take about 1.3 M; the header's bytes are bounded by read_gguf as well).
TRANSLATED_ARRAY_ITEMS = 1 << 24


class IncompatibleModel(ValueError):
    """An Ollama-format file that cannot be translated; the message names the architecture and what is missing."""


# --- what a translated file holds --------------------------------------------------------------------

@dataclass
class OutTensor:
    """A tensor of the translated file: the source file's byte ranges ``parts`` one after the other (copied
    kernel-side), passed through ``convert`` only when the type or values change."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length
    ggml_type: int
    parts: tuple[tuple[int, int], ...]  # (offset, length) in the source file
    convert: Callable[[bytes], bytes] | None = None

    @property
    def nbytes(self) -> int:
        _name, block, size = GGML_TYPES[self.ggml_type]
        count = 1
        for dim in self.shape:
            count *= dim
        return count // block * size


@dataclass
class Draft:
    """One file being translated: its typed metadata and its tensors, both in file order."""

    arch: str
    metadata: dict[str, tuple[int, int | None, Any]]  # key -> (value type, array item type, value)
    tensors: dict[str, OutTensor]

    @classmethod
    def of(cls, gguf: GGUFFile) -> Draft:
        skipped = [k for k, v in gguf.metadata.items() if isinstance(v, SkippedArray)]
        if skipped:
            raise IncompatibleModel(f"{gguf.architecture or 'this'} model's metadata arrays hold more than "
                                    f"{TRANSLATED_ARRAY_ITEMS} items in all (from {skipped[0]} on), more than a "
                                    "translation reads")
        metadata = {k: (*gguf.value_types[k], v) for k, v in gguf.metadata.items()}
        tensors = {t.name: OutTensor(t.name, t.shape, t.ggml_type, ((t.offset, t.nbytes),)) for t in gguf.tensors}
        return cls(gguf.architecture or "", metadata, tensors)

    # metadata
    def get(self, key: str, default: Any = None) -> Any:
        entry = self.metadata.get(key)
        return default if entry is None else entry[2]

    def has(self, key: str) -> bool:
        return key in self.metadata

    def set(self, key: str, value: Any, value_type: int, item_type: int | None = None) -> None:
        self.metadata[key] = (value_type, item_type, value)

    def inject(self, key: str, value: Any, value_type: int, item_type: int | None = None) -> None:
        """Set ``key`` only where the file lacks it (a default the converter left out)."""
        if key not in self.metadata:
            self.set(key, value, value_type, item_type)

    def copy(self, source: str, target: str, origin: Draft | None = None) -> None:
        """``target`` takes ``source``'s value (and type) where the file (or ``origin``'s) has ``source``."""
        metadata = (origin or self).metadata
        if source in metadata:
            self.metadata[target] = metadata[source]

    def drop(self, key: str) -> None:
        self.metadata.pop(key, None)

    def rename_arch(self, new: str) -> None:
        """``general.architecture`` and every ``<arch>.`` key under the new name."""
        old = self.arch
        self.metadata = {(new + k[len(old):] if k.startswith(old + ".") else k): v for k, v in self.metadata.items()}
        self.set("general.architecture", new, STRING)
        self.arch = new

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    # tensors
    def tensor(self, name: str) -> OutTensor | None:
        return self.tensors.get(name)

    def need(self, name: str, why: str) -> OutTensor:
        tensor = self.tensors.get(name)
        if tensor is None:
            raise IncompatibleModel(f"it has no tensor {name!r} ({why})")
        return tensor

    def rename_tensor(self, old: str, new: str) -> None:
        if old in self.tensors:
            self.tensors = {(new if k == old else k): v for k, v in self.tensors.items()}
            self.tensors[new].name = new

    def rename_containing(self, needle: str, replacement: str) -> None:
        """Replace the first ``needle`` in every tensor name that holds it (Ollama's leaf renames)."""
        renamed: dict[str, OutTensor] = {}
        for name, tensor in self.tensors.items():
            if needle in name:
                tensor.name = name.replace(needle, replacement, 1)
            renamed[tensor.name] = tensor
        self.tensors = renamed

    def replace(self, sources: list[str], made: OutTensor) -> None:
        """``made`` where the first of ``sources`` stood; the sources leave the file."""
        tensors: dict[str, OutTensor] = {}
        for name, tensor in self.tensors.items():
            if name == sources[0]:
                tensors[made.name] = made
            elif name not in sources:
                tensors[name] = tensor
        self.tensors = tensors

    def take(self, prefixes: Iterable[str]) -> dict[str, OutTensor]:
        """Remove the tensors whose names start with one of ``prefixes``; returns them in file order."""
        prefixes = tuple(prefixes)
        taken = {k: v for k, v in self.tensors.items() if k.startswith(prefixes)}
        self.tensors = {k: v for k, v in self.tensors.items() if k not in taken}
        return taken

    def keys_under(self, prefix: str) -> list[str]:
        return [k for k in self.metadata if k.startswith(prefix)]


@dataclass
class Translation:
    """What an Ollama-format file becomes: a model llama.cpp loads and, when it carried its encoder, a projector."""

    variant: str  # Ollama's architecture name, e.g. "gptoss"
    model: Draft
    projector: Draft | None = None
    dropped: list[str] = field(default_factory=list)  # what llama.cpp has no use for (embedded MTP layers, ...)


# --- tensor conversions --------------------------------------------------------------------------------

def _to_f32(source_type: int) -> Callable[[bytes], bytes]:
    """F16 (or F32) bytes as F32: projectors keep their patch and position embeddings in F32."""
    import numpy as np

    def convert(data: bytes) -> bytes:
        if source_type == GGML_F32:
            return data
        return np.frombuffer(data, dtype=np.float16).astype(np.float32).tobytes()

    return convert


def promote_to_f32(draft: Draft, name: str) -> None:
    tensor = draft.tensor(name)
    if tensor is not None and tensor.ggml_type == GGML_F16:
        tensor.convert, tensor.ggml_type = _to_f32(GGML_F16), GGML_F32


def fuse_rows(draft: Draft, target: str, sources: list[str], why: str) -> None:
    """``target`` becomes ``sources`` stacked along their outer dimension (same row length and type), where the
    first source stood: llama.cpp's fused gate+up or QKV matrices. The sources leave the file."""
    parts = [draft.need(name, why) for name in sources]
    first = parts[0]
    for part in parts[1:]:
        if part.shape[:-1] != first.shape[:-1] or part.ggml_type != first.ggml_type:
            raise IncompatibleModel(f"tensors {first.name!r} and {part.name!r} differ in shape or type, "
                                    f"so they cannot be fused into {target!r}")
    draft.replace(sources, OutTensor(target, (*first.shape[:-1], sum(p.shape[-1] for p in parts)), first.ggml_type,
                                     tuple(span for p in parts for span in p.parts)))


# --- the variants ---------------------------------------------------------------------------------------

VISION_PREFIXES = ("v.", "mm.")
AUDIO_PREFIXES = ("a.",)


def _has_prefix(gguf: GGUFFile, *prefixes: str) -> bool:
    return any(t.name.startswith(prefixes) for t in gguf.tensors)


def _arch_is(gguf: GGUFFile, name: str) -> bool:
    return gguf.architecture == name


def _gptoss(draft: Draft, out: Translation) -> None:
    draft.rename_arch("gpt-oss")
    if not draft.has(draft.key("expert_feed_forward_length")):
        gate = draft.need("blk.0.ffn_gate_exps.weight",
                          "its shape gives expert_feed_forward_length, which the file lacks")
        if len(gate.shape) != 3:
            raise IncompatibleModel(f"tensor 'blk.0.ffn_gate_exps.weight' has shape {gate.shape}, expected "
                                    "[n_embd, n_ff_exp, n_expert]")
        draft.set(draft.key("expert_feed_forward_length"), gate.shape[1], U32)
    draft.inject(draft.key("rope.scaling.type"), "yarn", STRING)
    draft.set("tokenizer.ggml.pre", "gpt-4o", STRING)  # Harmony headers tokenize wrong with the GPT-2 split
    draft.rename_containing(".attn_out", ".attn_output")
    draft.rename_containing(".attn_sinks", ".attn_sinks.weight")
    draft.rename_containing(".ffn_norm", ".post_attention_norm")


def _lfm2(draft: Draft, out: Translation) -> None:
    draft.rename_tensor("output_norm.weight", "token_embd_norm.weight")
    draft.set("tokenizer.ggml.pre", "lfm2", STRING)
    gate = draft.tensor("blk.0.ffn_gate.weight")
    if gate is not None and draft.get(draft.key("feed_forward_length")) != gate.shape[1]:
        draft.set(draft.key("feed_forward_length"), gate.shape[1], U32)  # some files state a wrong width


def _olmo3(draft: Draft, out: Translation) -> None:
    draft.rename_arch("olmo2")  # llama.cpp's olmo2 graph has OLMo 3's sliding-window layers


def _collapse_to_max(draft: Draft, key: str, fallback: int) -> None:
    """A per-layer array (0 for recurrent layers) as the one number llama.cpp reads: its largest value."""
    value = draft.get(key)
    if isinstance(value, list):
        draft.set(key, max(value, default=0) or fallback, U32)


def _pad_sections(draft: Draft, source: str, target: str) -> None:
    """Three M-RoPE sections as the four llama.cpp reads (the last 0), under llama.cpp's key."""
    value = draft.get(source)
    if isinstance(value, list) and len(value) == 3:
        draft.drop(source)
        draft.set(target, [*value, 0], ARRAY, I32)


def _rename_ssm_dt(draft: Draft) -> None:
    for name in [n for n in draft.tensors if n.endswith(".ssm_dt")]:
        draft.rename_tensor(name, name + ".bias")


def _qwen3next(draft: Draft, out: Translation) -> None:
    _collapse_to_max(draft, draft.key("attention.head_count_kv"), 0)
    _rename_ssm_dt(draft)


def _qwen35(draft: Draft, out: Translation) -> None:
    _collapse_to_max(draft, draft.key("attention.head_count_kv"), 2)
    _pad_sections(draft, draft.key("rope.dimension_sections"), draft.key("rope.dimension_sections"))
    _rename_ssm_dt(draft)
    if draft.take(("mtp.",)):
        out.dropped.append("the multi-token-prediction layers (mtp.*)")


def _mistral3(draft: Draft, out: Translation) -> None:
    for old, new in (("rope.scaling.beta_fast", "rope.scaling.yarn_beta_fast"),
                     ("rope.scaling.beta_slow", "rope.scaling.yarn_beta_slow"),
                     ("rope.scaling.mscale_all_dim", "rope.scaling.yarn_log_multiplier"),
                     ("rope.scaling_beta", "attention.temperature_scale")):
        draft.copy(draft.key(old), draft.key(new))
    if draft.get("tokenizer.ggml.pre") in (None, "", "default"):
        draft.set("tokenizer.ggml.pre", "tekken", STRING)


GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] "
    "| trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def _gemma3(draft: Draft, out: Translation) -> None:
    draft.copy(draft.key("rope.global.freq_base"), draft.key("rope.freq_base"))
    draft.copy(draft.key("rope.local.freq_base"), draft.key("rope.freq_base_swa"))
    draft.inject(draft.key("attention.layer_norm_rms_epsilon"), 1e-6, F32)
    draft.inject(draft.key("rope.freq_base"), 1_000_000.0, F32)
    draft.inject(draft.key("rope.freq_base_swa"), 10_000.0, F32)
    draft.inject("tokenizer.chat_template", GEMMA3_TEMPLATE, STRING)
    if (draft.get(draft.key("context_length")) or 0) >= 131072:  # 4B and up: linear RoPE scaling by 8
        draft.inject(draft.key("rope.scaling.type"), "linear", STRING)
        draft.inject(draft.key("rope.scaling.factor"), 8.0, F32)
    embd = draft.tensor("token_embd.weight")
    if embd is not None:  # Ollama keeps multimodal tokens past the embedding's rows
        rows = embd.shape[1]
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            value = draft.get(key)
            if isinstance(value, list) and len(value) > rows:
                value_type, item_type, _ = draft.metadata[key]
                draft.set(key, value[:rows], value_type, item_type)


def _interleaved(gate: OutTensor, up: OutTensor, n_expert: int) -> tuple[tuple[int, int], ...]:
    """Each expert's gate rows then its up rows (llama.cpp's fused ``ffn_gate_up_exps``), as byte ranges of
    the separate gate and up tensors."""
    (gate_at, size), (up_at, _size) = gate.parts[0], up.parts[0]
    step = size // n_expert
    return tuple(span for e in range(n_expert) for span in ((gate_at + e * step, step), (up_at + e * step, step)))


def _gemma4(draft: Draft, out: Translation) -> None:
    if draft.get("tokenizer.ggml.model") == "llama":  # Gemma 4's vocabulary is BPE: its control tokens split otherwise
        draft.set("tokenizer.ggml.model", "gemma4", STRING)
    if draft.take(("model.vision_tower.",)):
        out.dropped.append("the vision tower (model.vision_tower.*)")
    for block in range(int(draft.get(draft.key("block_count"), 0))):
        b = f"blk.{block}."
        gate, up = draft.tensor(b + "ffn_gate_exps.weight"), draft.tensor(b + "ffn_up_exps.weight")
        sidecars = any(draft.tensor(b + name) for name in ("ffn_gate_exps.scale", "ffn_gate_exps.input_scale",
                                                          "ffn_up_exps.scale", "ffn_up_exps.input_scale"))
        if (gate and up and not sidecars and draft.tensor(b + "ffn_gate_up_exps.weight") is None
                and len(gate.shape) == 3 and gate.shape == up.shape and gate.ggml_type == up.ggml_type
                and len(gate.parts) == len(up.parts) == 1 and gate.convert is None and up.convert is None):
            n_embd, n_ff, n_expert = gate.shape
            draft.replace([gate.name, up.name], OutTensor(b + "ffn_gate_up_exps.weight", (n_embd, 2 * n_ff, n_expert),
                                                          gate.ggml_type, _interleaved(gate, up, n_expert)))
        draft.rename_tensor(b + "ffn_gate_inp.per_expert_scale", b + "ffn_down_exps.scale")


def _glmocr(draft: Draft, out: Translation) -> None:
    draft.rename_arch("glm4")
    _pad_sections(draft, draft.key("rope.mrope_section"), draft.key("rope.dimension_sections"))
    if not draft.has(draft.key("rope.dimension_count")):
        draft.copy(draft.key("attention.key_length"), draft.key("rope.dimension_count"))
    draft.set("tokenizer.ggml.pre", "chatglm-bpe", STRING)
    draft.rename_containing(".attn_out.", ".attn_output.")
    draft.rename_containing(".post_attn_norm.", ".post_attention_norm.")
    draft.rename_containing(".post_ffn_norm.", ".post_ffw_norm.")
    for block in range(int(draft.get(draft.key("block_count"), 0))):
        gate, up = f"blk.{block}.ffn_gate.weight", f"blk.{block}.ffn_up.weight"
        if gate in draft.tensors:  # GLM4 reads gate and up as one matrix, gate first
            fuse_rows(draft, up, [gate, up], "GLM4 fuses each block's gate and up projections")


def _glm4moelite(draft: Draft, out: Translation) -> None:
    head_dim = draft.get(draft.key("attention.key_length"))
    draft.rename_arch("deepseek2")
    draft.set(draft.key("attention.head_count_kv"), 1, U32)  # MLA: one absorbed KV head
    kv_lora, rope_dim = draft.get(draft.key("attention.kv_lora_rank")), draft.get(draft.key("rope.dimension_count"))
    if kv_lora is None or rope_dim is None:
        raise IncompatibleModel("it lacks attention.kv_lora_rank or rope.dimension_count, which give the MLA "
                                "key and value lengths")
    draft.set(draft.key("attention.key_length"), kv_lora + rope_dim, U32)
    draft.set(draft.key("attention.value_length"), kv_lora, U32)
    if head_dim is not None:
        draft.set(draft.key("attention.key_length_mla"), head_dim, U32)
        draft.set(draft.key("attention.value_length_mla"), head_dim, U32)
    draft.inject(draft.key("expert_group_count"), 1, U32)
    draft.inject(draft.key("expert_group_used_count"), 1, U32)
    draft.set("tokenizer.ggml.pre", "glm4", STRING)
    eos = draft.get("tokenizer.ggml.eos_token_ids")
    if isinstance(eos, list):
        for index, key in ((1, "tokenizer.ggml.eot_token_id"), (2, "tokenizer.ggml.eom_token_id")):
            if len(eos) > index and eos[index] >= 0:
                draft.inject(key, eos[index], U32)


def _qwen25vl(draft: Draft, out: Translation) -> None:
    draft.rename_arch("qwen2vl")
    _pad_sections(draft, draft.key("rope.mrope_section"), draft.key("rope.dimension_sections"))


def _qwen3vl(draft: Draft, out: Translation) -> None:
    draft.set(draft.key("rope.dimension_sections"), [24, 20, 20, 0], ARRAY, I32)
    deepstack = draft.get(draft.key("vision.deepstack_visual_indexes"))
    draft.inject(draft.key("n_deepstack_layers"), len(deepstack) if isinstance(deepstack, list) else 0, U32)


def _nemotron_h_moe(draft: Draft, out: Translation) -> None:
    if not draft.has(draft.key("moe_latent_size")):
        latent = next((t for n, t in draft.tensors.items() if n.endswith(".ffn_latent_in.weight")), None)
        if latent is not None:
            draft.set(draft.key("moe_latent_size"), latent.shape[1], U32)
    draft.rename_containing(".ffn_latent_in", ".ffn_latent_down")
    draft.rename_containing(".ffn_latent_out", ".ffn_latent_up")
    if draft.take(("mtp.",)):
        out.dropped.append("the multi-token-prediction layers (mtp.*)")


# --- projectors split out of the model file ------------------------------------------------------------

def _vision_keys(model: Draft, projector: Draft, names: Iterable[str]) -> None:
    """``<arch>.vision.<name>`` keys of the model as the projector's ``clip.vision.<name>``."""
    for name in names:
        projector.copy(model.key(f"vision.{name}"), f"clip.vision.{name}", model)


_VISION_KEYS = ("block_count", "embedding_length", "feed_forward_length", "image_size", "patch_size",
                "attention.head_count", "attention.layer_norm_epsilon", "num_channels", "projection_dim",
                "image_mean", "image_std", "spatial_merge_size")


def _projector_draft(model: Draft, tensors: dict[str, OutTensor], projector_type: str) -> Draft:
    projector = Draft("clip", {}, tensors)
    projector.set("general.architecture", "clip", STRING)
    projector.copy("general.alignment", "general.alignment", model)
    projector.set("clip.projector_type", projector_type, STRING)
    projector.set("clip.has_vision_encoder", True, BOOL)
    _vision_keys(model, projector, _VISION_KEYS)
    if not projector.has("clip.vision.projection_dim"):  # the projector's output is the language model's input
        projector.copy(model.key("embedding_length"), "clip.vision.projection_dim", model)
    return projector


def _gemma3_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    projector = _projector_draft(model, tensors, "gemma3")
    projector.copy(model.key("embedding_length"), "clip.vision.projection_dim", model)
    projector.inject("clip.vision.image_mean", [0.5, 0.5, 0.5], ARRAY, F32)
    projector.inject("clip.vision.image_std", [0.5, 0.5, 0.5], ARRAY, F32)
    projector.inject("clip.use_gelu", True, BOOL)
    for old, new in (("v.patch_embedding", "v.patch_embd"), ("v.position_embedding", "v.position_embd"),
                     ("v.post_layernorm", "v.post_ln"), (".layer_norm1", ".ln1"), (".layer_norm2", ".ln2"),
                     (".attn_output", ".attn_out"), (".mlp.fc1", ".ffn_down"), (".mlp.fc2", ".ffn_up"),
                     ("mm.mm_input_projection", "mm.input_projection"), ("mm.mm_soft_emb_norm", "mm.soft_emb_norm")):
        projector.rename_containing(old, new)
    promote_to_f32(projector, "v.patch_embd.weight")
    promote_to_f32(projector, "v.position_embd.weight")
    return projector


def _rope_permuted(n_head: int, n_rows: int, row_bytes: int) -> Callable[[bytes], bytes]:
    """A Q or K matrix's rows from Hugging Face's order into llama.cpp's RoPE order (its converter's
    ``permute``): within each head, row ``half * head_dim/2 + i`` moves to ``2 * i + half``. Whole rows move,
    so any tensor type works."""
    import numpy as np

    head_dim = n_rows // n_head
    target = np.arange(n_rows)
    head, within = target // head_dim, target % head_dim
    source = head * head_dim + (within % 2) * (head_dim // 2) + within // 2

    def convert(data: bytes) -> bytes:
        return np.frombuffer(data, np.uint8).reshape(n_rows, row_bytes)[source].tobytes()

    return convert


CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def _mistral3_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """Mistral 3's Pixtral encoder: llama.cpp's names, RoPE-ordered Q/K rows (Ollama's converter left the
    encoder's in Hugging Face's order) and a zero ``[IMG_BREAK]`` embedding the pixtral graph adds."""
    projector = _projector_draft(model, tensors, "pixtral")
    projector.copy(model.key("spatial_merge_size"), "clip.vision.spatial_merge_size", model)
    projector.copy(model.key("vision.rope.freq_base"), "clip.rope.freq_base", model)
    projector.inject("clip.vision.attention.layer_norm_epsilon", 1e-5, F32)
    projector.inject("clip.vision.image_mean", CLIP_MEAN, ARRAY, F32)
    projector.inject("clip.vision.image_std", CLIP_STD, ARRAY, F32)
    projector.inject("clip.use_silu", True, BOOL)
    n_head = projector.get("clip.vision.attention.head_count")
    if not n_head:
        raise IncompatibleModel("it lacks mistral3.vision.attention.head_count, which orders the encoder's Q/K rows")
    for name, tensor in projector.tensors.items():
        if name.startswith("v.blk.") and name.endswith((".attn_q.weight", ".attn_k.weight")):
            if tensor.shape[1] % n_head:
                raise IncompatibleModel(f"tensor {name!r} has {tensor.shape[1]} rows, not a multiple of "
                                        f"{n_head} heads")
            tensor.convert = _rope_permuted(n_head, tensor.shape[1], tensor.nbytes // tensor.shape[1])
    n_embd = model.get(model.key("embedding_length"))
    if n_embd:
        projector.tensors["v.token_embd.img_break"] = OutTensor("v.token_embd.img_break", (n_embd,), GGML_F32, (),
                                                                lambda _: bytes(4 * n_embd))
    for old, new in (("v.patch_conv", "v.patch_embd"), ("v.encoder_norm", "v.pre_ln"), (".attn_output", ".attn_out"),
                     (".attn_norm", ".ln1"), (".ffn_norm", ".ln2"), ("mm.linear_1", "mm.1"), ("mm.linear_2", "mm.2"),
                     ("mm.patch_merger.merging_layer", "mm.patch_merger"), ("mm.norm", "mm.input_norm")):
        projector.rename_containing(old, new)
    promote_to_f32(projector, "v.patch_embd.weight")
    return projector


def _llava_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """A LLaVA-style encoder carried in the model file (``<arch>.vision.*`` keys, llama.cpp's tensor names):
    projector type ``<arch>.vision.projector_type``, else ``mlp`` (as Ollama defaults LLaVA projectors)."""
    projector = _projector_draft(model, tensors, str(model.get(model.key("vision.projector_type")) or "mlp"))
    projector.copy(model.key("vision.use_gelu"), "clip.use_gelu", model)
    projector.copy(model.key("vision.use_silu"), "clip.use_silu", model)
    return projector


def _patch_embedding_slice(source: OutTensor, frame: int, n_channels: int) -> OutTensor:
    """One temporal frame of Ollama's Qwen3-VL/3.5 patch embedding (one Conv3D weight, ggml shape
    ``[w, h, 2, out*in]``) as the Conv2D weight llama.cpp's converter writes per frame (``[w, h, in, out]``, F32)."""
    import numpy as np

    width, height, frames, packed = source.shape
    if frames != 2 or packed % n_channels or source.ggml_type not in (GGML_F16, GGML_F32):
        raise IncompatibleModel(f"its patch embedding {source.name!r} has shape {list(source.shape)} (type "
                                f"{source.ggml_type}), not two F16 or F32 frames of {n_channels} channels each")
    dtype = np.float16 if source.ggml_type == GGML_F16 else np.float32

    def convert(data: bytes) -> bytes:
        frames_first = np.frombuffer(data, dtype).reshape(packed // n_channels, n_channels, frames, height, width)
        return frames_first[:, :, frame].astype(np.float32).tobytes()

    name = "v.patch_embd.weight" + (".1" if frame else "")
    return OutTensor(name, (width, height, n_channels, packed // n_channels), GGML_F32, source.parts, convert)


def _as_f32(tensor: OutTensor) -> Callable[[bytes], bytes]:
    """A tensor's bytes dequantized to F32 (gguf's reference dequantization)."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    kind = GGMLQuantizationType(tensor.ggml_type)

    def convert(data: bytes) -> bytes:
        return dequantize(np.frombuffer(data, np.uint8), kind).astype(np.float32).tobytes()

    return convert


def fuse_rows_any_type(draft: Draft, target: str, sources: list[str], why: str) -> None:
    """:func:`fuse_rows`, and where the sources' types differ (Ollama's Qwen3-VL files hold F16 Q and K beside a
    Q8_0 V), the fused tensor in F32."""
    parts = [draft.need(name, why) for name in sources]
    if len({p.ggml_type for p in parts}) == 1:
        fuse_rows(draft, target, sources, why)
        return
    converters = [(_as_f32(p), p.parts) for p in parts]
    lengths = [sum(length for _start, length in p.parts) for p in parts]

    def convert(data: bytes) -> bytes:
        out, at = [], 0
        for (to_f32, _parts), length in zip(converters, lengths):
            out.append(to_f32(data[at:at + length]))
            at += length
        return b"".join(out)

    first = parts[0]
    draft.replace(sources, OutTensor(target, (*first.shape[:-1], sum(p.shape[-1] for p in parts)), GGML_F32,
                                     tuple(span for p in parts for span in p.parts), convert))


QWEN3VL_RENAMES = (("v.merger.norm", "v.post_ln"), ("v.merger.linear_fc1", "mm.0"), ("v.merger.linear_fc2", "mm.2"),
                   ("v.patch_embed.bias", "v.patch_embd.bias"), ("v.pos_embed", "v.position_embd"),
                   (".norm1", ".ln1"), (".norm2", ".ln2"), (".mlp.linear_fc1", ".ffn_up"),
                   (".mlp.linear_fc2", ".ffn_down"))


def _qwen3vl_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """The Qwen3-VL (and Qwen 3.5) encoder as a ``qwen3vl_merger`` projector: one QKV matrix a block, the Conv3D
    patch embedding as two per-frame Conv2D weights, the merger and deepstack adapters under llama.cpp's names."""
    projector = _projector_draft(model, tensors, "qwen3vl_merger")
    projector.copy(model.key("embedding_length"), "clip.vision.projection_dim", model)
    projector.copy(model.key("vision.temporal_patch_size"), "clip.vision.temporal_patch_size", model)
    projector.copy(model.key("vision.rope.freq_base"), "clip.vision.rope.freq_base", model)
    qwen3vl = model.arch.startswith("qwen3vl")
    if qwen3vl:  # Qwen 3.5's mmproj leaves these to libmtmd's defaults, as Ollama does
        projector.inject("clip.vision.num_channels", 3, U32)
        projector.inject("clip.vision.temporal_patch_size", 2, U32)
        projector.inject("clip.vision.rope.freq_base", 10000.0, F32)
        projector.copy(model.key("vision.shortest_edge"), "clip.vision.image_min_pixels", model)
        projector.copy(model.key("vision.longest_edge"), "clip.vision.image_max_pixels", model)
        projector.inject("clip.vision.image_min_pixels", 65536, U32)
        projector.inject("clip.vision.image_max_pixels", 16777216, U32)
    projector.inject("clip.vision.attention.layer_norm_epsilon", 1e-6, F32)
    projector.inject("clip.vision.image_mean", [0.5, 0.5, 0.5], ARRAY, F32)
    projector.inject("clip.vision.image_std", [0.5, 0.5, 0.5], ARRAY, F32)
    projector.inject("clip.use_gelu", True, BOOL)
    fc1 = projector.tensor("v.blk.0.mlp.linear_fc1.weight")
    if fc1 is not None:
        projector.inject("clip.vision.feed_forward_length", fc1.shape[1], U32)
    positions, patch = projector.tensor("v.pos_embed.weight"), projector.get("clip.vision.patch_size")
    if positions is not None and patch:
        projector.inject("clip.vision.image_size", math.isqrt(positions.shape[1]) * patch, U32)
    n_block = int(projector.get("clip.vision.block_count") or 0)
    deepstack = model.get(model.key("vision.deepstack_visual_indexes")) or []
    projector.inject("clip.vision.is_deepstack_layers", [i in deepstack for i in range(n_block)], ARRAY, BOOL)
    for block in range(n_block):
        b = f"v.blk.{block}."
        for kind in ("weight", "bias"):
            if projector.tensor(f"{b}attn_q.{kind}") is not None:
                fuse_rows_any_type(projector, f"{b}attn_qkv.{kind}", [f"{b}attn_{x}.{kind}" for x in "qkv"],
                                   "llama.cpp reads a vision block's Q, K and V as one matrix")
    patches = projector.tensor("v.patch_embed.weight")
    if patches is not None:
        n_channels = int(projector.get("clip.vision.num_channels") or 3)
        projector.replace([patches.name], _patch_embedding_slice(patches, 0, n_channels))
        projector.tensors["v.patch_embd.weight.1"] = _patch_embedding_slice(patches, 1, n_channels)
    for index, layer in enumerate(deepstack):
        for old, new in (("norm", "norm"), ("linear_fc1", "fc1"), ("linear_fc2", "fc2")):
            projector.rename_containing(f"v.deepstack_merger.{index}.{old}.", f"v.deepstack.{layer}.{new}.")
    for old, new in QWEN3VL_RENAMES:
        projector.rename_containing(old, new)
    promote_to_f32(projector, "v.position_embd.weight")
    return projector


def _qwen25vl_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """The Qwen2.5-VL encoder (llama.cpp's block names already) as a ``qwen2.5vl_merger`` projector."""
    projector = _projector_draft(model, tensors, "qwen2.5vl_merger")
    projector.copy(model.key("embedding_length"), "clip.vision.projection_dim", model)
    projector.copy(model.key("vision.window_size"), "clip.vision.window_size", model)
    up = projector.tensor("v.blk.0.ffn_up.weight")
    if up is not None:
        projector.inject("clip.vision.feed_forward_length", up.shape[1], U32)
    full_attention = model.get(model.key("vision.fullatt_block_indexes"))
    if isinstance(full_attention, list) and full_attention:  # window attention in between, as llama.cpp's converter
        projector.set("clip.vision.n_wa_pattern", int(full_attention[0]) + 1, U32)
    projector.inject("clip.vision.n_wa_pattern", 8, U32)
    projector.inject("clip.vision.image_size", 560, U32)
    projector.inject("clip.vision.image_mean", CLIP_MEAN, ARRAY, F32)
    projector.inject("clip.vision.image_std", CLIP_STD, ARRAY, F32)
    projector.inject("clip.use_silu", True, BOOL)
    for old, new in (("v.merger.ln_q.", "v.post_ln."), ("v.merger.mlp.0.", "mm.0."), ("v.merger.mlp.2.", "mm.2.")):
        projector.rename_containing(old, new)
    _per_frame_patch_embeddings(projector)
    return projector


def _glmocr_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """GLM-OCR's encoder (llama.cpp's names but for the patch embedding pair) as a ``glm4v`` projector."""
    projector = _projector_draft(model, tensors, "glm4v")
    for old, new in (("intermediate_size", "feed_forward_length"),
                     ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"),
                     ("out_hidden_size", "projection_dim")):
        projector.copy(model.key(f"vision.{old}"), f"clip.vision.{new}", model)
    projector.inject("clip.use_silu", True, BOOL)
    _per_frame_patch_embeddings(projector)
    return projector


def _per_frame_patch_embeddings(projector: Draft) -> None:
    """Ollama's pair of per-frame patch embeddings (``v.patch_embd_0``/``_1``) under llama.cpp's names, in F32
    as its converter writes them (Qwen2.5-VL, GLM-OCR)."""
    for frame, name in enumerate(("v.patch_embd.weight", "v.patch_embd.weight.1")):
        projector.rename_tensor(f"v.patch_embd_{frame}.weight", name)
        promote_to_f32(projector, name)


def _llama4_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """Llama 4's encoder and its three-layer projector as a ``llama4`` projector (llama.cpp's names)."""
    projector = _projector_draft(model, tensors, "llama4")
    projector.set("clip.vision.projector_type", "llama4", STRING)
    projector.copy(model.key("embedding_length"), "clip.vision.projection_dim", model)
    projector.copy(model.key("vision.layer_norm_epsilon"), "clip.vision.attention.layer_norm_epsilon", model)
    ratio = model.get(model.key("vision.pixel_shuffle_ratio"))
    projector.inject("clip.vision.projector.scale_factor", round(1 / ratio) if ratio and ratio > 0 else 2, U32)
    projector.inject("clip.vision.image_mean", [0.5, 0.5, 0.5], ARRAY, F32)
    projector.inject("clip.vision.image_std", [0.5, 0.5, 0.5], ARRAY, F32)
    projector.inject("clip.use_gelu", True, BOOL)
    projector.rename_tensor("v.positional_embedding_vlm", "v.position_embd.weight")
    for old, new in (("v.vision_adapter.mlp.fc1", "mm.model.mlp.1"), ("v.vision_adapter.mlp.fc2", "mm.model.mlp.2"),
                     ("mm.linear_1", "mm.model.fc"), ("v.class_embedding", "v.class_embd"),
                     ("v.layernorm_post", "v.post_ln"), ("v.layernorm_pre", "v.pre_ln"),
                     ("v.patch_embedding", "v.patch_embd"), (".attn_output", ".attn_out"), (".attn_norm", ".ln1"),
                     (".ffn_norm", ".ln2"), (".mlp.fc1", ".ffn_up"), (".mlp.fc2", ".ffn_down")):
        projector.rename_containing(old, new)
    return projector


#: The linears of a Gemma 4 vision block that clamp their input and output (Gemma4ClippableLinear), in the order
#: of Ollama's packed ``v.clamp_data``: each block's, then the projection's, four floats a linear.
GEMMA4_CLAMPED = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down")
CLAMP_BOUNDS = ("input_min", "input_max", "output_min", "output_max")
FLT_MAX = 3.4028234663852886e38


def _clamp_bound(index: int) -> Callable[[bytes], bytes]:
    """Bound ``index`` of a linear's row of four; a row of zeros is a linear Ollama had no clamp for (its table
    is zero-filled): no bound, as llama.cpp takes a missing one."""
    def convert(row: bytes) -> bytes:
        values = struct.unpack("<4f", row)
        return struct.pack("<f", values[index] if any(values) else (-FLT_MAX, FLT_MAX)[index % 2])

    return convert


def _gemma4_vision_clamps(projector: Draft, n_blocks: int) -> None:
    """Ollama's packed ``v.clamp_data`` as the scalars llama.cpp's gemma4v reads by name beside each linear
    (``v.blk.0.attn_q.input_min`` ...): without them libmtmd would not clamp, and images would read otherwise."""
    packed = projector.take(("v.clamp_data",)).get("v.clamp_data")
    if packed is None:
        return
    linears = [f"v.blk.{b}.{linear}" for b in range(n_blocks) for linear in GEMMA4_CLAMPED] + ["mm.input_projection"]
    if packed.ggml_type != GGML_F32 or packed.shape != (4 * len(linears),) or len(packed.parts) != 1:
        raise IncompatibleModel(f"its v.clamp_data has shape {list(packed.shape)} (type {packed.ggml_type}), not "
                                f"four F32 bounds for each of {len(linears)} linears")
    start = packed.parts[0][0]
    for row, linear in enumerate(linears):
        for index, bound in enumerate(CLAMP_BOUNDS):
            name = f"{linear}.{bound}"
            projector.tensors[name] = OutTensor(name, (1,), GGML_F32, ((start + 16 * row, 16),), _clamp_bound(index))


def _gemma4_clip(model: Draft, tensors: dict[str, OutTensor]) -> Draft:
    """Gemma 4's SigLIP encoder (``gemma4v``, llama.cpp's names already) and its conformer audio encoder
    (``gemma4a``, a few leaves renamed) as one projector with both."""
    vision = any(name.startswith("v.") for name in tensors)
    projector = _projector_draft(model, tensors, "gemma4v") if vision else Draft("clip", {}, tensors)
    projector.drop("clip.projector_type")  # one per modality instead
    projector.set("general.architecture", "clip", STRING)
    projector.copy("general.alignment", "general.alignment", model)
    if vision:
        projector.set("clip.vision.projector_type", "gemma4v", STRING)
        projector.copy(model.key("embedding_length"), "clip.vision.projection_dim", model)
        projector.inject("clip.vision.image_size", 224, U32)
        projector.inject("clip.vision.image_mean", [0.0, 0.0, 0.0], ARRAY, F32)  # the encoder normalises itself
        projector.inject("clip.vision.image_std", [1.0, 1.0, 1.0], ARRAY, F32)
        promote_to_f32(projector, "v.patch_embd.weight")
        _gemma4_vision_clamps(projector, int(model.get(model.key("vision.block_count"), 0)))
    if any(name.startswith("a.") for name in tensors):
        projector.set("clip.has_audio_encoder", True, BOOL)
        projector.set("clip.audio.projector_type", "gemma4a", STRING)
        for name in ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
                     "attention.layer_norm_epsilon"):
            projector.copy(model.key(f"audio.{name}"), f"clip.audio.{name}", model)
        projector.inject("clip.audio.num_mel_bins", 128, U32)
        projector.copy(model.key("embedding_length"), "clip.audio.projection_dim", model)
        projector.rename_tensor("a.pre_encode.out.weight", "a.input_projection.weight")
        projector.rename_tensor("mm.a.fc.weight", "a.pre_encode.out.weight")
        projector.rename_tensor("mm.a.fc.bias", "a.pre_encode.out.bias")
        for block in range(int(model.get(model.key("audio.block_count"), 0))):
            for old, new in (("ln1", "attn_pre_norm"), ("ln2", "attn_post_norm"), ("layer_pre_norm", "ln2"),
                             ("linear_pos", "attn_k_rel")):  # in this order: ln2's name is taken after it moves
                projector.rename_tensor(f"a.blk.{block}.{old}.weight", f"a.blk.{block}.{new}.weight")
    return projector


@dataclass(frozen=True)
class Variant:
    """One Ollama layout: how to tell it from llama.cpp's, and how to translate it."""

    detect: Callable[[GGUFFile], bool]
    text: Callable[[Draft, Translation], None]
    encoder: Callable[[Draft, dict[str, OutTensor]], Draft] | None = None  # the embedded encoders as a projector


def _mistral3_marked(gguf: GGUFFile) -> bool:
    keys = ("rope.scaling.beta_fast", "rope.scaling.mscale_all_dim", "rope.scaling_beta")
    return _has_prefix(gguf, *VISION_PREFIXES) or any(f"mistral3.{k}" in gguf.metadata for k in keys)


def _gemma3_marked(gguf: GGUFFile) -> bool:
    keys = ("mm.tokens_per_image", "rope.global.freq_base", "rope.local.freq_base")
    return (_has_prefix(gguf, *VISION_PREFIXES) or any(f"gemma3.{k}" in gguf.metadata for k in keys)
            or "gemma3.attention.layer_norm_rms_epsilon" not in gguf.metadata)


VARIANTS: dict[str, Variant] = {
    "gptoss": Variant(lambda g: _arch_is(g, "gptoss"), _gptoss),
    "lfm2": Variant(lambda g: _arch_is(g, "lfm2") and g.tensor("output_norm.weight") is not None
                    and g.tensor("token_embd_norm.weight") is None, _lfm2),
    "olmo3": Variant(lambda g: _arch_is(g, "olmo3"), _olmo3),
    "qwen3next": Variant(lambda g: _arch_is(g, "qwen3next") and any(t.name.endswith(".ssm_dt") for t in g.tensors),
                         _qwen3next),
    "qwen35": Variant(lambda g: _arch_is(g, "qwen35") and _qwen35_marked(g), _qwen35, encoder=_qwen3vl_clip),
    "qwen35moe": Variant(lambda g: _arch_is(g, "qwen35moe") and _qwen35_marked(g), _qwen35, encoder=_qwen3vl_clip),
    "mistral3": Variant(lambda g: _arch_is(g, "mistral3") and _mistral3_marked(g), _mistral3, encoder=_mistral3_clip),
    "gemma3": Variant(lambda g: _arch_is(g, "gemma3") and _gemma3_marked(g), _gemma3, encoder=_gemma3_clip),
    "gemma4": Variant(lambda g: _arch_is(g, "gemma4") and (
        _has_prefix(g, *VISION_PREFIXES, *AUDIO_PREFIXES, "model.vision_tower.")
        or g.metadata.get("tokenizer.ggml.model") == "llama"), _gemma4, encoder=_gemma4_clip),
    "glmocr": Variant(lambda g: _arch_is(g, "glmocr"), _glmocr, encoder=_glmocr_clip),
    "glm4moelite": Variant(lambda g: _arch_is(g, "glm4moelite"), _glm4moelite),
    "qwen25vl": Variant(lambda g: _arch_is(g, "qwen25vl"), _qwen25vl, encoder=_qwen25vl_clip),
    "qwen3vl": Variant(lambda g: _arch_is(g, "qwen3vl") and "qwen3vl.rope.dimension_sections" not in g.metadata,
                       _qwen3vl, encoder=_qwen3vl_clip),
    "qwen3vlmoe": Variant(lambda g: _arch_is(g, "qwen3vlmoe")
                          and "qwen3vlmoe.rope.dimension_sections" not in g.metadata, _qwen3vl,
                          encoder=_qwen3vl_clip),
    "nemotron_h_moe": Variant(lambda g: _arch_is(g, "nemotron_h_moe") and (
        _has_prefix(g, "mtp.") or any(t.name.endswith(".ffn_latent_in.weight") for t in g.tensors)), _nemotron_h_moe),
    "llama4": Variant(lambda g: _arch_is(g, "llama4") and _has_prefix(g, *VISION_PREFIXES), lambda d, o: None,
                      encoder=_llama4_clip),
}
#: Any other language model that carries a LLaVA-style encoder in llama.cpp's tensor names.
EMBEDDED_LLAVA = Variant(lambda g: g.architecture not in ("clip", "mmproj", None) and _has_prefix(g, "v.blk.")
                         and _has_prefix(g, "mm."), lambda d, o: None, encoder=_llava_clip)


def _qwen35_marked(gguf: GGUFFile) -> bool:
    arch = gguf.architecture
    keys = ("vision.block_count", "image_token_id", "ssm.v_head_reordered", "rope.mrope_interleaved")
    if arch == "qwen35moe":  # llama.cpp's converter states only the experts' width
        keys += ("feed_forward_length",)
    return any(f"{arch}.{k}" in gguf.metadata for k in keys) or _has_prefix(gguf, "mtp.", "v.")


def variant_of(gguf: GGUFFile) -> str | None:
    """The Ollama layout ``gguf`` is in (its architecture name, or ``embedded-llava``); None when llama.cpp
    loads it as it is. Reads only names, so a header read with long arrays skipped will do."""
    for name, variant in VARIANTS.items():
        if variant.detect(gguf):
            return name
    return "embedded-llava" if EMBEDDED_LLAVA.detect(gguf) else None


def _splits(gguf: GGUFFile) -> bool:
    name = variant_of(gguf)
    return name is not None and VARIANTS.get(name, EMBEDDED_LLAVA).encoder is not None


def carries_vision(gguf: GGUFFile) -> bool:
    """Whether the Ollama-format file ``gguf`` carries a vision encoder that is split out as a projector."""
    return _splits(gguf) and _has_prefix(gguf, "v.")


def carries_audio(gguf: GGUFFile) -> bool:
    """Whether the Ollama-format file ``gguf`` carries an audio encoder that is split out into the projector."""
    return _splits(gguf) and variant_of(gguf) in AUDIO_VARIANTS and _has_prefix(gguf, *AUDIO_PREFIXES)


#: The layouts whose audio encoder (``a.*``) is translated with the vision encoder; others' is left out.
AUDIO_VARIANTS = ("gemma4",)


def plan(gguf: GGUFFile) -> Translation:
    """What the Ollama-format file ``gguf`` (its whole header, arrays included) becomes; IncompatibleModel
    naming the architecture and the problem when it cannot be translated."""
    name = variant_of(gguf)
    if name is None:
        raise ValueError(f"{gguf.path} is not in one of Ollama's own layouts")
    variant = VARIANTS.get(name, EMBEDDED_LLAVA)
    draft = Draft.of(gguf)
    out = Translation(name, draft)
    try:
        encoder = draft.take(VISION_PREFIXES)  # first: the text's renames are not the encoder's
        audio = draft.take(AUDIO_PREFIXES)
        variant.text(draft, out)
        if audio and name in AUDIO_VARIANTS:
            encoder |= audio
        elif audio:
            out.dropped.append("the audio encoder (a.*)")
        if encoder and variant.encoder is not None:
            out.projector = variant.encoder(draft, encoder)
        elif encoder:
            out.dropped.append("the vision encoder (v.*, mm.*): its projector layout is not translated yet")
        if encoder:
            for key in draft.keys_under(draft.key("vision.")) + draft.keys_under(draft.key("audio.")):
                draft.drop(key)  # the projector's now
    except IncompatibleModel as exc:
        raise IncompatibleModel(f"the Ollama-format {gguf.architecture!r} file cannot be translated for llama.cpp: "
                                f"{exc}") from None
    return out


# --- writing -----------------------------------------------------------------------------------------

def _gguf_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _encode_value(value_type: int, item_type: int | None, value: Any) -> bytes:
    if value_type == STRING:
        return _gguf_string(value)
    if value_type == ARRAY:
        assert item_type is not None
        head = struct.pack("<IQ", item_type, len(value))
        if item_type == STRING:
            return head + b"".join(_gguf_string(v) for v in value)
        return head + struct.pack(f"<{len(value)}{_SCALAR_FORMATS[item_type]}", *value)
    return struct.pack("<" + _SCALAR_FORMATS[value_type], value)


def _header(draft: Draft, alignment: int) -> tuple[bytes, list[int]]:
    """The header (padded to ``alignment``) and each tensor's offset in the data section."""
    parts = [MAGIC, struct.pack("<IQQ", 3, len(draft.tensors), len(draft.metadata))]
    for key, (value_type, item_type, value) in draft.metadata.items():
        parts += [_gguf_string(key), struct.pack("<I", value_type), _encode_value(value_type, item_type, value)]
    offsets, offset = [], 0
    for tensor in draft.tensors.values():
        if len(tensor.name.encode()) > 63:
            raise IncompatibleModel(f"the translated tensor name {tensor.name!r} is longer than ggml's 63 bytes")
        offsets.append(offset)
        parts += [_gguf_string(tensor.name), struct.pack("<I", len(tensor.shape)),
                  struct.pack(f"<{len(tensor.shape)}Q", *tensor.shape), struct.pack("<IQ", tensor.ggml_type, offset)]
        offset += -(-tensor.nbytes // alignment) * alignment
    header = b"".join(parts)
    return header + b"\0" * (-len(header) % alignment), offsets


def _copy_range(src: BinaryIO, dst: BinaryIO, src_offset: int, dst_offset: int, count: int) -> None:
    """``count`` bytes from ``src_offset`` to ``dst_offset``, kernel-side where the system can (no trip through
    Python, a shared extent on filesystems that reflink); read and write otherwise."""
    done = 0
    with contextlib.suppress(AttributeError, OSError):
        while done < count:
            n = os.copy_file_range(src.fileno(), dst.fileno(), count - done, src_offset + done, dst_offset + done)
            if n == 0:
                break
            done += n
    while done < count:
        chunk = os.pread(src.fileno(), min(count - done, 8 << 20), src_offset + done)
        if not chunk:
            raise InvalidGGUF(f"file is truncated: tensor data ends before byte {src_offset + count}")
        os.pwrite(dst.fileno(), chunk, dst_offset + done)
        done += len(chunk)


def _read_range(src: BinaryIO, offset: int, length: int) -> bytes:
    data = os.pread(src.fileno(), length, offset)
    if len(data) != length:
        raise InvalidGGUF(f"file is truncated: tensor data ends before byte {offset + length}")
    return data


def write(draft: Draft, source: Path, target: Path, alignment: int) -> None:
    """Write ``draft`` as a GGUF file at ``target``, its tensor data read from ``source``."""
    header, offsets = _header(draft, alignment)
    with open(source, "rb") as src, open(target, "wb") as dst:
        dst.write(header)
        end = len(header)
        for tensor, offset in zip(draft.tensors.values(), offsets):
            at = end = len(header) + offset
            if tensor.convert is None and sum(length for _start, length in tensor.parts) != tensor.nbytes:
                raise IncompatibleModel(f"tensor {tensor.name!r} would take {tensor.nbytes} bytes, but its source "
                                        "bytes differ in length")
            if tensor.convert is None:
                for start, length in tensor.parts:
                    _copy_range(src, dst, start, at, length)
                    at += length
            else:
                data = tensor.convert(b"".join(_read_range(src, start, length) for start, length in tensor.parts))
                if len(data) != tensor.nbytes:
                    raise IncompatibleModel(f"tensor {tensor.name!r} converts to {len(data)} bytes, "
                                            f"expected {tensor.nbytes}")
                os.pwrite(dst.fileno(), data, at)
            end += tensor.nbytes
        dst.truncate(end)
        dst.flush()
        os.fsync(dst.fileno())


# --- the cache -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TranslatedFiles:
    """The files llama.cpp loads in place of an Ollama-format blob."""

    model: Path
    projector: Path | None


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextlib.contextmanager
def _digest_lock(digest: str) -> Iterator[None]:
    """One translation of a blob at a time: a second load of it waits for the first one's files."""
    with _locks_guard:
        lock = _locks.setdefault(digest, threading.Lock())
    with lock:
        yield


def _version_dir(store: Store, digest: str) -> Path:
    return store.translated_dir(digest) / f"v{TRANSLATION_VERSION}"


def cached(store: Store, digest: str) -> TranslatedFiles | None:
    """The translated files of blob ``digest`` if they were made already (a look at the directory)."""
    directory = _version_dir(store, digest)
    model = directory / MODEL_FILE
    if not model.is_file():
        return None
    projector = directory / PROJECTOR_FILE
    return TranslatedFiles(model, projector if projector.is_file() else None)


def translate(store: Store, digest: str) -> TranslatedFiles:
    """The translated files of Ollama-format blob ``digest``, made once (slow: the whole file is copied).

    Written into a directory in ``partial/`` that is renamed into the cache whole, so the cache never holds
    half a translation; IncompatibleModel (or InvalidGGUF for a broken blob) leaves nothing behind.
    """
    with _digest_lock(digest):
        source = store.blob_path(digest)
        gguf = read_gguf(source, keep_items=TRANSLATED_ARRAY_ITEMS)
        variant = variant_of(gguf)
        if variant is None:
            raise ValueError(f"blob {digest} is not in one of Ollama's own layouts")
        found = cached(store, digest)
        if found is not None:
            return found
        translation = plan(gguf)
        work = store.temp_path("translated")
        work.mkdir()
        try:
            write(translation.model, source, work / MODEL_FILE, gguf.alignment)
            if translation.projector is not None:
                write(translation.projector, source, work / PROJECTOR_FILE, gguf.alignment)
            final = _version_dir(store, digest)
            if final.parent.exists():
                shutil.rmtree(final.parent)  # an older translation's files
            final.parent.mkdir(parents=True)
            os.rename(work, final)
            _fsync_dir(final.parent)
            log.info("translated the Ollama-format %s file %s for llama.cpp%s%s", variant, digest,
                     ", its encoder split out as a projector" if translation.projector else "",
                     "".join(f"; left out {what}" for what in translation.dropped))
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
        found = cached(store, digest)
        assert found is not None
        return found
