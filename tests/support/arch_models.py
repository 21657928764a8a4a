"""Tiny models of the architectures Ollama's converter lays out its own way, in both layouts.

Each builder writes the same random weights either as llama.cpp's converter writes them
(``layout="upstream"``) or as Ollama's library files hold them (``layout="ollama"``: other
architecture and key names, other tensor names, keys left out, the vision encoder inside the
one file), so a test can check that the translated Ollama file gives the upstream file's logits.
SmolLM2's BPE vocabulary (``vocab_from``) makes them chat through the real daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, RopeScalingType
from gguf.quants import quantize

from localllm.gguf import read_gguf

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LAYOUTS = ("upstream", "ollama")


@lru_cache(maxsize=4)
def _tokenizer(source: Path) -> tuple[tuple[str, Any, int, int | None], ...]:
    """``source``'s ``tokenizer.*`` keys: (key, value, GGUF type, array item type), read once."""
    header = read_gguf(source)
    return tuple((k, v, *header.value_types[k]) for k, v in header.metadata.items()
                 if k.startswith("tokenizer.") and k != "tokenizer.chat_template")


def _copy_tokenizer(source: Path, w: GGUFWriter, pre: str | None) -> int:
    """``source``'s tokenizer onto ``w`` (its pre-tokenizer name replaced by ``pre`` when given) and a ChatML
    template; the vocabulary size."""
    for key, value, kind, item in _tokenizer(source):
        if key == "tokenizer.ggml.pre" and pre is not None:
            continue
        w.add_key_value(key, value, GGUFValueType(kind), sub_type=None if item is None else GGUFValueType(item))
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_chat_template(CHATML)
    return len(dict((k, v) for k, v, *_ in _tokenizer(source))["tokenizer.ggml.tokens"])


class _Weights:
    """Random weights by name, the same for every layout (one generator, drawn in a fixed order)."""

    def __init__(self, w: GGUFWriter, seed: int, rename: Callable[[str], str]) -> None:
        self.w, self.rng, self.rename = w, np.random.default_rng(seed), rename

    def __call__(self, name: str, *shape: int, scale: float = 0.3, q8: bool = False) -> None:
        data = (self.rng.standard_normal(shape[::-1]) * scale).astype(np.float32)
        if q8:  # quantized experts, as real gpt-oss files hold theirs (MXFP4 there): bytes copied as they are
            self.w.add_tensor(self.rename(name), quantize(data, GGMLQuantizationType.Q8_0),
                              raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            self.w.add_tensor(self.rename(name), data)


def _finish(w: GGUFWriter, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gpt_oss(path: Path, vocab_from: Path, layout: str = "upstream", n_layer: int = 2, seed: int = 11,
            drop: tuple[str, ...] = ()) -> Path:
    """A two-layer gpt-oss (attention sinks, biased attention, 4 experts of which 2 are used, every other
    layer sliding-window). ``layout="ollama"`` writes it as Ollama's library does: architecture
    ``gptoss``, ``attn_out``/``attn_sinks``/``ffn_norm`` tensors, no ``expert_feed_forward_length``,
    rope scaling type or gpt-4o pre-tokenizer. ``drop`` leaves tensors out (inconsistent files)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    arch = "gptoss" if ollama else "gpt-oss"
    e, head, n_head, n_kv, n_exp, ff_exp = 64, 16, 4, 2, 4, 32
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(2)
    w.add_sliding_window(16)
    if not ollama:
        w.add_expert_feed_forward_length(ff_exp)
        w.add_rope_scaling_type(RopeScalingType.YARN)
    w.add_file_type(0)
    vocab = _copy_tokenizer(vocab_from, w, pre=None if ollama else "gpt-4o")

    names = {".attn_output": ".attn_out", ".attn_sinks.weight": ".attn_sinks", ".post_attention_norm": ".ffn_norm"}

    def rename(name: str) -> str:
        if ollama:
            for upstream, theirs in names.items():
                name = name.replace(upstream, theirs)
        return name

    t = _Weights(w, seed, rename)
    skip = set(drop)
    layer_tensors: list[tuple[str, tuple[int, ...], bool]] = [
        ("attn_norm.weight", (e,), False), ("post_attention_norm.weight", (e,), False),
        ("attn_q.weight", (e, n_head * head), False), ("attn_k.weight", (e, n_kv * head), False),
        ("attn_v.weight", (e, n_kv * head), False), ("attn_output.weight", (n_head * head, e), False),
        ("attn_q.bias", (n_head * head,), False), ("attn_k.bias", (n_kv * head,), False),
        ("attn_v.bias", (n_kv * head,), False), ("attn_output.bias", (e,), False),
        ("attn_sinks.weight", (n_head,), False),
        ("ffn_gate_inp.weight", (e, n_exp), False), ("ffn_gate_inp.bias", (n_exp,), False),
        ("ffn_gate_exps.weight", (e, ff_exp, n_exp), True), ("ffn_up_exps.weight", (e, ff_exp, n_exp), True),
        ("ffn_down_exps.weight", (ff_exp, e, n_exp), True),
        ("ffn_gate_exps.bias", (ff_exp, n_exp), False), ("ffn_up_exps.bias", (ff_exp, n_exp), False),
        ("ffn_down_exps.bias", (e, n_exp), False),
    ]
    for name, shape, q8 in [("token_embd.weight", (e, vocab), False), ("output_norm.weight", (e,), False),
                            ("output.weight", (e, vocab), False)]:
        t(name, *shape, q8=q8)
    for il in range(n_layer):
        for leaf, shape, q8 in layer_tensors:
            name = f"blk.{il}.{leaf}"
            if rename(name) in skip or name in skip:
                t.rng.standard_normal(int(np.prod(shape)))  # keep the other weights the same
                continue
            t(name, *shape, q8=q8)
    return _finish(w, path)


def olmo(path: Path, vocab_from: Path, layout: str = "upstream", seed: int = 5) -> Path:
    """A two-layer OLMo 3 (q/k norms over the whole projection, norms after attention and FFN, sliding
    window): architecture ``olmo2`` as llama.cpp loads it, ``olmo3`` as Ollama's library names it."""
    assert layout in LAYOUTS
    arch = "olmo3" if layout == "ollama" else "olmo2"
    e, n_head, n_kv, ff, n_layer = 64, 4, 4, 128, 2
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_sliding_window(8)
    w.add_file_type(0)
    vocab = _copy_tokenizer(vocab_from, w, pre=None)
    t = _Weights(w, seed, lambda name: name)
    t("token_embd.weight", e, vocab)
    t("output_norm.weight", e)
    t("output.weight", e, vocab)
    for il in range(n_layer):
        b = f"blk.{il}."
        for name, shape in (("attn_q.weight", (e, e)), ("attn_k.weight", (e, e)), ("attn_v.weight", (e, e)),
                            ("attn_output.weight", (e, e)), ("attn_q_norm.weight", (e,)), ("attn_k_norm.weight", (e,)),
                            ("post_attention_norm.weight", (e,)), ("ffn_gate.weight", (e, ff)),
                            ("ffn_up.weight", (e, ff)), ("ffn_down.weight", (ff, e)), ("post_ffw_norm.weight", (e,))):
            t(b + name, *shape)
    return _finish(w, path)


def embedded_projector(path: Path, language_model: Path, projector: Path, truncate_to: int | None = None) -> Path:
    """``language_model`` and ``projector`` as one GGUF, the way Ollama's library ships a vision model: the
    encoder's tensors (``v.*``, ``mm.*``) after the language model's, its ``clip.vision.*`` keys as
    ``<arch>.vision.*`` and no ``clip.*`` key. ``truncate_to`` cuts the file to that many bytes."""
    lm, mm = read_gguf(language_model), read_gguf(projector)
    arch = lm.architecture
    w = GGUFWriter(str(path), arch)
    for header, keep in ((lm, lambda key: True), (mm, lambda key: key.startswith("clip.vision."))):
        for key, value in header.metadata.items():
            if key == "general.architecture" or not keep(key):
                continue
            kind, item = header.value_types[key]
            w.add_key_value(key.replace("clip.vision.", f"{arch}.vision.", 1), value, GGUFValueType(kind),
                            sub_type=None if item is None else GGUFValueType(item))
    w.add_bool(f"{arch}.vision.use_gelu", bool(mm.metadata["clip.use_gelu"]))
    tensors = [(language_model, t) for t in lm.tensors] + [(projector, t) for t in mm.tensors]
    for _source, t in tensors:  # raw bytes: numpy's shape is the rows, each of its bytes
        byte_shape = (*reversed(t.shape[1:]), t.nbytes // max(1, int(np.prod(t.shape[1:]))))
        w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), t.nbytes, GGMLQuantizationType(t.ggml_type))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for source, t in tensors:
        with open(source, "rb") as f:
            f.seek(t.offset)
            w.write_tensor_data(np.frombuffer(f.read(t.nbytes), dtype=np.uint8))
    w.close()
    if truncate_to is not None:
        with open(path, "r+b") as f:
            f.truncate(truncate_to)
    return path


GEMMA3_VISION = {"image_size": 32, "patch_size": 4, "embedding_length": 16, "feed_forward_length": 32,
                 "block_count": 1, "attention.head_count": 2}
# Ollama's tensor names of the Gemma 3 encoder, by llama.cpp's (whose ffn_down holds fc1: clip.cpp swaps them)
GEMMA3_OLLAMA_NAMES = {"v.patch_embd": "v.patch_embedding", "v.position_embd": "v.position_embedding",
                       "v.post_ln": "v.post_layernorm", ".ln1": ".layer_norm1", ".ln2": ".layer_norm2",
                       ".attn_out": ".attn_output", ".ffn_down": ".mlp.fc1", ".ffn_up": ".mlp.fc2",
                       "mm.input_projection": "mm.mm_input_projection", "mm.soft_emb_norm": "mm.mm_soft_emb_norm"}


def gemma3_vision(directory: Path, layout: str = "upstream", seed: int = 9) -> tuple[Path, Path | None]:
    """A two-layer Gemma 3 with a one-block SigLIP encoder (32-pixel images, 4-pixel patches, 4 image tokens):
    upstream, a language model and its ``mmproj`` (``clip.*`` keys, F32 patch embedding); ``ollama``, the one
    GGUF Ollama's library ships (``gemma3.vision.*`` keys, Ollama's tensor names, F16 patch embedding).
    Returns the model file and the projector file (None for the one-file layout)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    directory.mkdir(parents=True, exist_ok=True)
    vision = _gemma3_encoder(seed)

    def name(upstream: str) -> str:
        if ollama:
            for ours, theirs in GEMMA3_OLLAMA_NAMES.items():
                upstream = upstream.replace(ours, theirs)
        return upstream

    def extra(w: GGUFWriter) -> None:
        w.add_float32("gemma3.rope.freq_base_swa", 10000.0)
        w.add_chat_template(CHATML)
        if ollama:
            for key, value in GEMMA3_VISION.items():
                w.add_uint32(f"gemma3.vision.{key}", value)
            w.add_float32("gemma3.vision.attention.layer_norm_epsilon", 1e-6)
            for tensor, data in vision.items():
                w.add_tensor(name(tensor), data.astype(np.float16) if tensor == "v.patch_embd.weight" else data)

    model = _gemma3_language_model(directory / f"gemma3-{layout}.gguf", extra, seed)
    if ollama:
        return model, None
    w = GGUFWriter(str(directory / "gemma3-mmproj.gguf"), "clip")
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type("gemma3")
    for key, value in GEMMA3_VISION.items():
        w.add_uint32(f"clip.vision.{key}", value)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_vision_projection_dim(64)
    w.add_vision_image_mean([0.5, 0.5, 0.5])
    w.add_vision_image_std([0.5, 0.5, 0.5])
    w.add_vision_use_gelu(True)
    for tensor, data in vision.items():  # F16-rounded patch embedding: Ollama's file holds it in F16
        w.add_tensor(tensor, data.astype(np.float16).astype(np.float32) if tensor == "v.patch_embd.weight" else data)
    return model, _finish(w, directory / "gemma3-mmproj.gguf")


GEMMA3_SPECIALS = ["<unk>", "<s>", "</s>", "<start_of_image>", "<end_of_image>"]
GEMMA3_BYTES = [f"<0x{b:02X}>" for b in range(256)]  # SentencePiece's byte fallback: any text tokenizes
GEMMA3_TOKENS = GEMMA3_SPECIALS + GEMMA3_BYTES + [f"\u2581w{i}" for i in range(31)]


def _gemma3_language_model(path: Path, extra: Callable[[GGUFWriter], None], seed: int) -> Path:
    """A two-layer Gemma 3 (q/k norms, norms after attention and FFN, tied output) with a small SentencePiece
    vocabulary (byte fallback) that has the image delimiters libmtmd puts round a Gemma 3 image."""
    e, ff, n_head, n_kv, head, n_layer, vocab = 64, 128, 4, 2, 16, 2, len(GEMMA3_TOKENS)
    w = GGUFWriter(str(path), "gemma3")
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_token_list(GEMMA3_TOKENS)
    words = vocab - len(GEMMA3_SPECIALS) - len(GEMMA3_BYTES)
    w.add_token_scores([0.0] * (len(GEMMA3_SPECIALS) + len(GEMMA3_BYTES)) + [-float(i) for i in range(words)])
    w.add_token_types([2, 3, 3, 3, 3] + [6] * len(GEMMA3_BYTES) + [1] * words)  # unknown, control, byte, normal
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    extra(w)
    t = _Weights(w, seed, lambda name: name)
    t("token_embd.weight", e, vocab)
    t("output_norm.weight", e)
    for il in range(n_layer):
        b = f"blk.{il}."
        for name, shape in (("attn_norm.weight", (e,)), ("attn_q.weight", (e, n_head * head)),
                            ("attn_k.weight", (e, n_kv * head)), ("attn_v.weight", (e, n_kv * head)),
                            ("attn_q_norm.weight", (head,)), ("attn_k_norm.weight", (head,)),
                            ("attn_output.weight", (n_head * head, e)), ("post_attention_norm.weight", (e,)),
                            ("ffn_norm.weight", (e,)), ("ffn_gate.weight", (e, ff)), ("ffn_up.weight", (e, ff)),
                            ("ffn_down.weight", (ff, e)), ("post_ffw_norm.weight", (e,))):
            t(b + name, *shape)
    return _finish(w, path)


def _gemma3_encoder(seed: int) -> dict[str, np.ndarray]:
    """The encoder's weights by llama.cpp's names (numpy shapes: ggml's reversed)."""
    rng = np.random.default_rng(seed)
    hidden, ff, n_embd = GEMMA3_VISION["embedding_length"], GEMMA3_VISION["feed_forward_length"], 64
    patch, side = GEMMA3_VISION["patch_size"], GEMMA3_VISION["image_size"] // GEMMA3_VISION["patch_size"]

    def r(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    weights = {"v.patch_embd.weight": r(hidden, 3, patch, patch), "v.patch_embd.bias": r(hidden),
               "v.position_embd.weight": r(side * side, hidden)}
    blk = "v.blk.0."
    for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
        weights[f"{blk}{proj}.weight"], weights[f"{blk}{proj}.bias"] = r(hidden, hidden), r(hidden)
    for norm in ("ln1", "ln2"):
        weights[f"{blk}{norm}.weight"], weights[f"{blk}{norm}.bias"] = 1 + r(hidden), r(hidden)
    weights[f"{blk}ffn_down.weight"], weights[f"{blk}ffn_down.bias"] = r(ff, hidden), r(ff)  # fc1: hidden -> ff
    weights[f"{blk}ffn_up.weight"], weights[f"{blk}ffn_up.bias"] = r(hidden, ff), r(hidden)  # fc2: ff -> hidden
    weights["v.post_ln.weight"], weights["v.post_ln.bias"] = 1 + r(hidden), r(hidden)
    weights["mm.soft_emb_norm.weight"] = r(hidden)
    weights["mm.input_projection.weight"] = r(hidden, n_embd, scale=1.0)
    return weights
