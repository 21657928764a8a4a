"""Tiny models of the architectures Ollama's converter lays out its own way, in both layouts.

Each builder writes the same random weights either as llama.cpp's converter writes them
(``layout="upstream"``) or as Ollama's library files hold them (``layout="ollama"``: other
architecture and key names, other tensor names, keys left out, the vision encoder inside the
one file), so a test can check that the translated Ollama file gives the upstream file's logits.
SmolLM2's BPE vocabulary (``vocab_from``) makes them chat through the real daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, RopeScalingType
from gguf.quants import quantize

from localllm.gguf import read_gguf
from localllm.registry.ollama_compat import CLAMP_BOUNDS, GEMMA4_CLAMPED
from support.gguf_builders import tokenizer_fields

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LAYOUTS = ("upstream", "ollama")


def _copy_tokenizer(source: Path, w: GGUFWriter, pre: str | None, model: str | None = None) -> int:
    """``source``'s tokenizer onto ``w`` (its pre-tokenizer and tokenizer model names replaced by ``pre`` and
    ``model`` when given) and a ChatML template; the vocabulary size."""
    replaced = {"tokenizer.ggml.pre": pre, "tokenizer.ggml.model": model}
    fields = tokenizer_fields(source)
    for key, value, kind, item in fields:
        if replaced.get(key) is None:
            w.add_key_value(key, value, kind, sub_type=item)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    if model is not None:
        w.add_tokenizer_model(model)
    w.add_chat_template(CHATML)
    return next(len(value) for key, value, _, _ in fields if key == "tokenizer.ggml.tokens")


class _Weights:
    """Random weights by name, the same for every layout (one generator, drawn in a fixed order)."""

    def __init__(self, w: GGUFWriter, seed: int, rename: Callable[[str], str],
                 types: dict[str, GGMLQuantizationType] | None = None) -> None:
        self.w, self.rng, self.rename = w, np.random.default_rng(seed), rename
        self.types = types or {"expert": GGMLQuantizationType.Q8_0}

    def __call__(self, name: str, *shape: int, scale: float = 0.3, kind: str | None = None) -> None:
        """``kind`` ("expert", "matrix"): the tensor is quantized to ``types[kind]`` where that is given (real
        gpt-oss files hold MXFP4 experts and Q8_0 matrices); bytes copied as they are."""
        data = (self.rng.standard_normal(shape[::-1]) * scale).astype(np.float32)
        qtype = self.types.get(kind) if kind else None
        if qtype is not None:
            self.w.add_tensor(self.rename(name), quantize(data, qtype), raw_dtype=qtype)
        else:
            self.w.add_tensor(self.rename(name), data)


def byte_vocabulary(path: Path, words: Sequence[str] = ()) -> Path:
    """A vocabulary-only GGUF to lend its tokenizer (``vocab_from``): GPT-2's 256 byte tokens, ``words`` as
    tokens of their own, ChatML's two control tokens and one merge. Models of a few hundred rows are written and
    run far faster than with SmolLM2's 49,152; a grammar-forced reply is a few dozen tokens when its markers
    are ``words`` (a random model picks among the tokens the grammar allows)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    shifted = iter(range(256, 512))
    chars = [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]  # GPT-2's bytes_to_unicode
    encoded = ["".join(chars[b] for b in word.encode()) for word in words]
    tokens = [*chars, *encoded, "\u0120t", "<|im_start|>", "<|im_end|>"]
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 2) + [3, 3])
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(len(tokens) - 2)
    w.add_eos_token_id(len(tokens) - 1)
    return _finish(w, path)


def _finish(w: GGUFWriter, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gpt_oss(path: Path, vocab_from: Path, layout: str = "upstream", n_layer: int = 2, seed: int = 11,
            drop: tuple[str, ...] = (), context: int = 256, n_expert: int = 4, n_expert_used: int = 2,
            types: dict[str, GGMLQuantizationType] | None = None, yarn: tuple[float, int] | None = None,
            window: int = 16) -> Path:
    """A two-layer gpt-oss (attention sinks, biased attention, 4 experts of which 2 are used, every other
    layer sliding-window). ``layout="ollama"`` writes it as Ollama's library does: architecture
    ``gptoss``, ``attn_out``/``attn_sinks``/``ffn_norm`` tensors, no ``expert_feed_forward_length``,
    rope scaling type or gpt-4o pre-tokenizer. ``drop`` leaves tensors out (inconsistent files).
    ``types``: the quantization of the experts (default Q8_0) and other matrices (``{"expert": MXFP4,
    "matrix": Q8_0}`` as real files); ``yarn``: YaRN's factor and original context (gpt-oss: 32, 4096)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    arch = "gptoss" if ollama else "gpt-oss"
    e, head, n_head, n_kv, n_exp, ff_exp = 64, 16, 4, 2, n_expert, 32
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(context)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(n_expert_used)
    w.add_sliding_window(window)
    if not ollama:
        w.add_expert_feed_forward_length(ff_exp)
        w.add_rope_scaling_type(RopeScalingType.YARN)
        if yarn is not None:
            w.add_rope_scaling_factor(yarn[0])
            w.add_rope_scaling_orig_ctx_len(yarn[1])
    w.add_file_type(0)
    vocab = _copy_tokenizer(vocab_from, w, pre=None if ollama else "gpt-4o")

    names = {".attn_output": ".attn_out", ".attn_sinks.weight": ".attn_sinks", ".post_attention_norm": ".ffn_norm"}

    def rename(name: str) -> str:
        if ollama:
            for upstream, theirs in names.items():
                name = name.replace(upstream, theirs)
        return name

    t = _Weights(w, seed, rename, types)
    skip = set(drop)
    mat, exp = "matrix", "expert"
    layer_tensors: list[tuple[str, tuple[int, ...], str | None]] = [
        ("attn_norm.weight", (e,), None), ("post_attention_norm.weight", (e,), None),
        ("attn_q.weight", (e, n_head * head), mat), ("attn_k.weight", (e, n_kv * head), mat),
        ("attn_v.weight", (e, n_kv * head), mat), ("attn_output.weight", (n_head * head, e), mat),
        ("attn_q.bias", (n_head * head,), None), ("attn_k.bias", (n_kv * head,), None),
        ("attn_v.bias", (n_kv * head,), None), ("attn_output.bias", (e,), None),
        ("attn_sinks.weight", (n_head,), None),
        ("ffn_gate_inp.weight", (e, n_exp), None), ("ffn_gate_inp.bias", (n_exp,), None),
        ("ffn_gate_exps.weight", (e, ff_exp, n_exp), exp), ("ffn_up_exps.weight", (e, ff_exp, n_exp), exp),
        ("ffn_down_exps.weight", (ff_exp, e, n_exp), exp),
        ("ffn_gate_exps.bias", (ff_exp, n_exp), None), ("ffn_up_exps.bias", (ff_exp, n_exp), None),
        ("ffn_down_exps.bias", (e, n_exp), None),
    ]
    for name, shape, kind in [("token_embd.weight", (e, vocab), mat), ("output_norm.weight", (e,), None),
                              ("output.weight", (e, vocab), mat)]:
        t(name, *shape, kind=kind)
    for il in range(n_layer):
        for leaf, shape, kind in layer_tensors:
            name = f"blk.{il}.{leaf}"
            if rename(name) in skip or name in skip:
                t.rng.standard_normal(int(np.prod(shape)))  # keep the other weights the same
                continue
            t(name, *shape, kind=kind)
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


# --- the hybrid and other families Ollama lays out its own way, described by their shapes ------------------

Shape = tuple[int, ...]
_ARRAY_TYPES = {np.dtype(np.uint32): GGUFValueType.UINT32, np.dtype(np.int32): GGUFValueType.INT32,
                np.dtype(bool): GGUFValueType.BOOL, np.dtype(np.float32): GGUFValueType.FLOAT32}


def _add_keys(w: GGUFWriter, arch: str, keys: dict[str, Any]) -> None:
    """``keys`` (``@`` for ``<arch>.``) onto ``w``: ints as UINT32, floats as FLOAT32, strings, and numpy
    arrays typed by their dtype (Ollama writes per-layer counts as UINT32 arrays, llama.cpp sections as INT32,
    per-layer flags as BOOL)."""
    for key, value in keys.items():
        key = key.replace("@", f"{arch}.", 1)
        if isinstance(value, np.ndarray):
            w.add_key_value(key, value.tolist(), GGUFValueType.ARRAY, sub_type=_ARRAY_TYPES[value.dtype])
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, value)


def _tiny(path: Path, arch: str, vocab_from: Path, keys: dict[str, Any], tensors: list[tuple[str, Shape]],
          seed: int, pre: str | None = None, rename: Callable[[str], str] = lambda name: name,
          skip: Callable[[str], bool] = lambda name: False, tokenizer_model: str | None = None,
          given: dict[str, np.ndarray] | None = None, matrix_type: GGMLQuantizationType | None = None) -> Path:
    """A model of ``arch``: ``keys``, ``vocab_from``'s tokenizer, and random ``tensors`` (ggml shapes, the
    vocabulary's size as ``-1``) drawn in their order, so that two layouts of one model hold the same weights
    under ``rename``d names; a ``skip``ped tensor is drawn but not written (what Ollama leaves out). ``given``
    tensors (numpy shapes) follow as they are: weights one layout holds rearranged. ``matrix_type``: the matrices
    (2-D and more) quantized to it, the rest F32."""
    w = GGUFWriter(str(path), arch)
    _add_keys(w, arch, keys)
    w.add_file_type(0)
    vocab = _copy_tokenizer(vocab_from, w, pre, tokenizer_model)
    t = _Weights(w, seed, rename, {"matrix": matrix_type} if matrix_type is not None else None)
    for name, shape in tensors:
        shape = tuple(vocab if d == -1 else d for d in shape)
        if skip(name):
            t.rng.standard_normal(int(np.prod(shape)))
        else:
            t(name, *shape, kind="matrix" if len(shape) > 1 else None)
    for name, data in (given or {}).items():
        data = data.astype(np.float32)
        if matrix_type is not None and data.ndim > 1:
            w.add_tensor(name, quantize(data, matrix_type), raw_dtype=matrix_type)
        else:
            w.add_tensor(name, data)
    return _finish(w, path)


def _renamer(names: dict[str, str], ollama: bool) -> Callable[[str], str]:
    """llama.cpp's tensor names to Ollama's (``names``: parts of a name, upstream to theirs), for the Ollama
    layout; no change for the upstream one."""
    def rename(name: str) -> str:
        if ollama:
            for upstream, theirs in names.items():
                name = name.replace(upstream, theirs)
        return name
    return rename


def _dense_ffn(b: str, e: int, ff: int) -> list[tuple[str, Shape]]:
    return [(b + "ffn_gate.weight", (e, ff)), (b + "ffn_up.weight", (e, ff)), (b + "ffn_down.weight", (ff, e))]


def _attention(b: str, e: int, n_head: int, n_kv: int, head: int, gated: bool = False,
               qk_norm: bool = True) -> list[tuple[str, Shape]]:
    """Attention projections (``gated``: Q carries an output gate per head, as in Qwen3-Next and Qwen 3.5)."""
    tensors = [(b + "attn_q.weight", (e, n_head * head * (2 if gated else 1))), (b + "attn_k.weight", (e, n_kv * head)),
               (b + "attn_v.weight", (e, n_kv * head)), (b + "attn_output.weight", (n_head * head, e))]
    if qk_norm:
        tensors += [(b + "attn_q_norm.weight", (head,)), (b + "attn_k_norm.weight", (head,))]
    return tensors


def lfm2(path: Path, vocab_from: Path, layout: str = "upstream", seed: int = 21) -> Path:
    """A two-layer LFM2 (a short-convolution layer, then an attention layer; the norm before the tied output).
    Ollama's layout names that norm ``output_norm`` (llama.cpp ``token_embd_norm``), states a wrong
    ``feed_forward_length`` and no ``lfm2`` pre-tokenizer."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    e, ff, n_head, n_kv, head, conv = 64, 96, 4, 2, 16, 3
    keys = {"@block_count": 2, "@context_length": 256, "@embedding_length": e,
            "@feed_forward_length": ff * 2 if ollama else ff, "@attention.head_count": n_head,
            "@attention.head_count_kv": np.array([0, n_kv], np.uint32), "@attention.layer_norm_rms_epsilon": 1e-5,
            "@rope.freq_base": 10000.0, "@shortconv.l_cache": conv}
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("token_embd_norm.weight", (e,))]
    for il in range(2):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,)), (b + "ffn_norm.weight", (e,)), *_dense_ffn(b, e, ff)]
        tensors += ([(b + "shortconv.conv.weight", (conv, e)), (b + "shortconv.in_proj.weight", (e, 3 * e)),
                     (b + "shortconv.out_proj.weight", (e, e))] if il == 0 else _attention(b, e, n_head, n_kv, head))
    return _tiny(path, "lfm2", vocab_from, keys, tensors, seed, pre=None if ollama else "lfm2",
                 rename=_renamer({"token_embd_norm": "output_norm"}, ollama))


def _gated_delta_net(b: str, e: int, k_head: int, n_k: int, v_head: int, n_v: int, conv: int,
                     fused: bool) -> list[tuple[str, Shape]]:
    """A Gated DeltaNet layer: Qwen3-Next's fused ``ssm_in`` (q, k, v, z) and ``ssm_ba``, or Qwen 3.5's
    ``attn_qkv``, ``attn_gate`` (z), ``ssm_beta`` and ``ssm_alpha``."""
    qkv = 2 * k_head * n_k + v_head * n_v
    projections = ([(b + "ssm_in.weight", (e, qkv + v_head * n_v)), (b + "ssm_ba.weight", (e, 2 * n_v))] if fused
                   else [(b + "attn_qkv.weight", (e, qkv)), (b + "attn_gate.weight", (e, v_head * n_v)),
                         (b + "ssm_beta.weight", (e, n_v)), (b + "ssm_alpha.weight", (e, n_v))])
    return [*projections, (b + "ssm_conv1d.weight", (conv, qkv)), (b + "ssm_dt.bias", (n_v,)),
            (b + "ssm_norm.weight", (v_head,)), (b + "ssm_out.weight", (v_head * n_v, e))]  # ssm_a: see qwen_hybrid


def _shared_expert(b: str, e: int, ff: int) -> list[tuple[str, Shape]]:
    return [(b + name.replace(".weight", "_shexp.weight"), shape) for name, shape in _dense_ffn("", e, ff)]


def _moe(b: str, e: int, n_exp: int, ff_exp: int, ff_shared: int) -> list[tuple[str, Shape]]:
    """A router, experts and a gated shared expert (Qwen3-Next and Qwen 3.5 MoE)."""
    return [(b + "ffn_gate_inp.weight", (e, n_exp)), (b + "ffn_gate_exps.weight", (e, ff_exp, n_exp)),
            (b + "ffn_up_exps.weight", (e, ff_exp, n_exp)), (b + "ffn_down_exps.weight", (ff_exp, e, n_exp)),
            (b + "ffn_gate_inp_shexp.weight", (e,)), *_shared_expert(b, e, ff_shared)]


def qwen_hybrid(path: Path, vocab_from: Path, arch: str, layout: str = "upstream", seed: int = 23,
                context: int = 256, split_experts: bool = False, extra_keys: dict[str, Any] | None = None,
                n_embd: int = 64, d_state: int = 16, mtp: bool = False) -> Path:
    """A four-layer Qwen hybrid: three Gated DeltaNet layers, then a gated full-attention layer (Qwen 3.5's
    every fourth). ``arch`` is ``qwen35`` (dense), ``qwen35moe`` or ``qwen3next`` (both MoE with a shared
    expert). Ollama's layout: ``head_count_kv`` per layer (0 for recurrent layers), ``ssm_dt`` without its
    ``.bias``, and for Qwen 3.5 three M-RoPE sections and a multi-token-prediction layer (``mtp.*``) in the file
    (its vision tower: :func:`qwen3vl_encoder`). ``n_embd``: 256 or more makes the matrices that read the
    embedding K-quantizable; ``d_state``: the width of each DeltaNet head (and of its state's rows); ``mtp``: a
    multi-token-prediction layer after the four (``nextn_predict_layers`` 1, as llama.cpp's converter writes
    Qwen 3.5's), the trunk's weights unchanged."""
    assert layout in LAYOUTS and arch in ("qwen35", "qwen35moe", "qwen3next")
    ollama, qwen35 = layout == "ollama", arch.startswith("qwen35")
    e, n_layer, n_head, n_kv, head, conv = n_embd, 4, 4, 2, 16, 4
    k_head, n_k, v_head, n_v = d_state, 2, d_state, 4
    n_exp, ff_exp, ff = 4, 32, 96
    keys: dict[str, Any] = {
        "@block_count": n_layer, "@context_length": context, "@embedding_length": e, "@attention.head_count": n_head,
        "@attention.head_count_kv": np.array([0, 0, 0, n_kv], np.uint32) if ollama else n_kv,
        "@attention.key_length": head, "@attention.value_length": head, "@attention.layer_norm_rms_epsilon": 1e-6,
        "@rope.freq_base": 10000000.0, "@rope.dimension_count": head // 2, "@ssm.conv_kernel": conv,
        "@ssm.state_size": k_head, "@ssm.group_count": n_k, "@ssm.time_step_rank": n_v, "@ssm.inner_size": v_head * n_v,
        "@full_attention_interval": 4}
    if mtp:
        assert qwen35 and not ollama
        keys.update({"@block_count": n_layer + 1, "@nextn_predict_layers": 1})
    if qwen35:
        keys["@rope.dimension_sections"] = np.array([2, 3, 3] if ollama else [2, 3, 3, 0], np.int32)
    if ollama and arch == "qwen35moe":
        keys["@feed_forward_length"] = ff  # which llama.cpp's converter leaves out
    if arch == "qwen35":
        keys["@feed_forward_length"] = ff
    else:
        keys.update({"@expert_count": n_exp, "@expert_used_count": 2, "@expert_feed_forward_length": ff_exp,
                     "@expert_shared_feed_forward_length": ff_exp})
    keys |= extra_keys or {}
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,)), (b + "post_attention_norm.weight", (e,))]
        tensors += (_attention(b, e, n_head, n_kv, head, gated=True) if il % 4 == 3
                    else _gated_delta_net(b, e, k_head, n_k, v_head, n_v, conv, fused=arch == "qwen3next"))
        tensors += _dense_ffn(b, e, ff) if arch == "qwen35" else _moe(b, e, n_exp, ff_exp, ff_exp)
    extras = [("mtp.0.eh_proj.weight", (2 * e, e))] if qwen35 else []
    if mtp:  # after every trunk tensor: the same draws give the trunk the same weights
        b = f"blk.{n_layer}."
        extras += [(b + "attn_norm.weight", (e,)), (b + "post_attention_norm.weight", (e,)),
                   *_attention(b, e, n_head, n_kv, head, gated=True),
                   *(_dense_ffn(b, e, ff) if arch == "qwen35" else _moe(b, e, n_exp, ff_exp, ff_exp)),
                   (b + "nextn.eh_proj.weight", (2 * e, e)), (b + "nextn.enorm.weight", (e,)),
                   (b + "nextn.hnorm.weight", (e,))]
    rng = np.random.default_rng(seed + 1)  # negative, as -exp(A_log): a state that decays, finite over long prompts
    decays = {f"blk.{il}.ssm_a": -np.exp(rng.standard_normal(n_v) * 0.3) for il in range(n_layer) if il % 4 != 3}
    return _tiny(path, arch, vocab_from, keys, tensors + extras, seed, pre="qwen35" if qwen35 else "qwen2",
                 rename=_renamer({".ssm_dt.bias": ".ssm_dt"}, ollama),
                 skip=lambda name: not ollama and name.startswith("mtp."), given=decays)


def quantized_qwen_hybrid(directory: Path, vocab_from: Path, arch: str, ftype: int, n_embd: int = 64,
                          d_state: int = 16, context: int = 1024) -> Path:
    """:func:`qwen_hybrid` (upstream layout) written once in ``directory`` and quantized to ``ftype`` (a
    llama_ftype; 0: F32 as written) by llama.cpp's own quantizer: Q8_0 everywhere, or Q4_K_M's mix (Q4_K where
    rows are 256 wide, Q5_0/Q6_K/Q8_0 elsewhere); norms, convolutions and the DeltaNet's vectors stay F32."""
    from support.gguf_builders import quantized

    source = directory / f"{arch}-{n_embd}-s{d_state}-f32.gguf"
    if not source.exists():
        qwen_hybrid(source, vocab_from, arch, context=context, n_embd=n_embd, d_state=d_state)
    if not ftype:
        return source
    path = directory / f"{arch}-{n_embd}-s{d_state}-ftype{ftype}.gguf"
    return path if path.exists() else quantized(source, path, ftype)


def _llama_block(b: str, e: int, ff: int, n_head: int, n_kv: int, head: int) -> list[tuple[str, Shape]]:
    return [(b + "attn_norm.weight", (e,)), *_attention(b, e, n_head, n_kv, head, qk_norm=False),
            (b + "ffn_norm.weight", (e,)), *_dense_ffn(b, e, ff)]


def mistral3(path: Path, vocab_from: Path, layout: str = "upstream", seed: int = 25) -> Path:
    """A two-layer Mistral 3 language model with YaRN RoPE scaling. Ollama's layout names the YaRN keys
    ``rope.scaling.beta_fast``/``beta_slow``/``mscale_all_dim`` and the attention temperature
    ``rope.scaling_beta`` (llama.cpp: ``rope.scaling.yarn_*`` and ``attention.temperature_scale``)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    e, ff, n_head, n_kv, head = 64, 128, 4, 2, 16
    yarn = {"beta_fast": ("@rope.scaling.beta_fast", "@rope.scaling.yarn_beta_fast", 32.0),
            "beta_slow": ("@rope.scaling.beta_slow", "@rope.scaling.yarn_beta_slow", 1.0),
            "mscale": ("@rope.scaling.mscale_all_dim", "@rope.scaling.yarn_log_multiplier", 1.0),
            "beta": ("@rope.scaling_beta", "@attention.temperature_scale", 0.1)}
    keys: dict[str, Any] = {
        "@block_count": 2, "@context_length": 1024, "@embedding_length": e, "@feed_forward_length": ff,
        "@attention.head_count": n_head, "@attention.head_count_kv": n_kv, "@attention.key_length": head,
        "@attention.value_length": head, "@attention.layer_norm_rms_epsilon": 1e-5, "@rope.freq_base": 1e6,
        "@rope.dimension_count": head, "@rope.scaling.type": "yarn", "@rope.scaling.factor": 4.0,
        "@rope.scaling.original_context_length": 256,
        **{(theirs if ollama else ours): value for theirs, ours, value in yarn.values()}}
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il in range(2):
        tensors += _llama_block(f"blk.{il}.", e, ff, n_head, n_kv, head)
    return _tiny(path, "mistral3", vocab_from, keys, tensors, seed, pre="default" if ollama else "tekken")


def glm_ocr(path: Path, vocab_from: Path, layout: str = "upstream", seed: int = 27) -> Path:
    """GLM-OCR's two-layer language model: architecture ``glm4`` to llama.cpp (norms after attention and FFN,
    gate and up in one matrix, M-RoPE sections), ``glmocr`` in Ollama's layout (``attn_out``,
    ``post_attn_norm``, ``post_ffn_norm``, gate and up apart, three ``mrope_section``s, no rope dimension)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    e, ff, n_head, n_kv, head = 64, 96, 4, 2, 16
    keys: dict[str, Any] = {
        "@block_count": 2, "@context_length": 256, "@embedding_length": e, "@feed_forward_length": ff,
        "@attention.head_count": n_head, "@attention.head_count_kv": n_kv, "@attention.key_length": head,
        "@attention.value_length": head, "@attention.layer_norm_rms_epsilon": 1e-5, "@rope.freq_base": 10000.0}
    if ollama:
        keys["@rope.mrope_section"] = np.array([2, 3, 3], np.int32)
    else:
        keys.update({"@rope.dimension_count": head, "@rope.dimension_sections": np.array([2, 3, 3, 0], np.int32)})
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il in range(2):
        b = f"blk.{il}."
        ffn = ([(b + "ffn_gate.weight", (e, ff)), (b + "ffn_up.weight", (e, ff))] if ollama
               else [(b + "ffn_up.weight", (e, 2 * ff))])  # the same numbers: gate's rows, then up's
        tensors += [(b + "attn_norm.weight", (e,)), *_attention(b, e, n_head, n_kv, head, qk_norm=False),
                    (b + "post_attention_norm.weight", (e,)), (b + "ffn_norm.weight", (e,)), *ffn,
                    (b + "ffn_down.weight", (ff, e)), (b + "post_ffw_norm.weight", (e,))]
    names = {".attn_output.": ".attn_out.", ".post_attention_norm.": ".post_attn_norm.",
             ".post_ffw_norm.": ".post_ffn_norm."}
    return _tiny(path, "glmocr" if ollama else "glm4", vocab_from, keys, tensors, seed,
                 pre=None if ollama else "chatglm-bpe", rename=_renamer(names, ollama))


def glm4_moe_lite(path: Path, vocab_from: Path, layout: str = "upstream", seed: int = 29) -> Path:
    """A two-layer GLM-4.7-Flash (DeepSeek-V2 multi-head latent attention with a Q LoRA; a dense first layer,
    then sigmoid-routed experts with a shared one): architecture ``deepseek2`` with the absorbed-MLA key and
    value lengths to llama.cpp; ``glm4moelite`` in Ollama's older files, whose keys hold per-head lengths
    (``key_length`` the head's, ``head_count_kv`` every head, the ``_mla`` keys the absorbed ones)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    e, n_head, nope, rope, kv_lora, q_lora = 64, 4, 12, 4, 32, 24
    head = nope + rope  # the value head too, as in GLM-4.7-Flash
    n_exp, ff_exp, ff = 4, 32, 96
    per_head = {"@attention.head_count_kv": n_head, "@attention.key_length": head, "@attention.value_length": head,
                "@attention.key_length_mla": kv_lora + rope, "@attention.value_length_mla": kv_lora}
    absorbed = {"@attention.head_count_kv": 1, "@attention.key_length": kv_lora + rope,
                "@attention.value_length": kv_lora, "@attention.key_length_mla": head, "@attention.value_length_mla": head}
    keys: dict[str, Any] = {
        "@block_count": 2, "@context_length": 256, "@embedding_length": e, "@feed_forward_length": ff,
        "@attention.head_count": n_head, **(per_head if ollama else absorbed), "@attention.kv_lora_rank": kv_lora,
        "@attention.q_lora_rank": q_lora, "@rope.dimension_count": rope, "@attention.layer_norm_rms_epsilon": 1e-5,
        "@rope.freq_base": 1e6, "@leading_dense_block_count": 1, "@expert_count": n_exp, "@expert_used_count": 2,
        "@expert_shared_count": 1, "@expert_feed_forward_length": ff_exp, "@expert_weights_scale": 1.8,
        "@expert_weights_norm": True, "@expert_gating_func": 2}
    if not ollama:
        keys.update({"@expert_group_count": 1, "@expert_group_used_count": 1})
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il in range(2):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,)), (b + "attn_q_a.weight", (e, q_lora)),
                    (b + "attn_q_a_norm.weight", (q_lora,)), (b + "attn_q_b.weight", (q_lora, n_head * head)),
                    (b + "attn_kv_a_mqa.weight", (e, kv_lora + rope)), (b + "attn_kv_a_norm.weight", (kv_lora,)),
                    (b + "attn_k_b.weight", (nope, kv_lora, n_head)), (b + "attn_v_b.weight", (kv_lora, head, n_head)),
                    (b + "attn_output.weight", (n_head * head, e)), (b + "ffn_norm.weight", (e,))]
        if il == 0:
            tensors += _dense_ffn(b, e, ff)
        else:
            tensors += [(b + "ffn_gate_inp.weight", (e, n_exp)), (b + "exp_probs_b.bias", (n_exp,)),
                        (b + "ffn_gate_exps.weight", (e, ff_exp, n_exp)), (b + "ffn_up_exps.weight", (e, ff_exp, n_exp)),
                        (b + "ffn_down_exps.weight", (ff_exp, e, n_exp)), *_shared_expert(b, e, ff_exp)]
    return _tiny(path, "glm4moelite" if ollama else "deepseek2", vocab_from, keys, tensors, seed, pre="glm4")


def nemotron_h(path: Path, vocab_from: Path, arch: str = "nemotron_h", layout: str = "upstream",
               seed: int = 31) -> Path:
    """A four-layer Nemotron-H: Mamba-2, attention, feed-forward, Mamba-2 (each layer's kind told by the
    per-layer ``head_count_kv`` and ``feed_forward_length``). ``nemotron_h_moe`` makes the feed-forward layer
    sigmoid-routed experts in a latent space with a shared expert; Ollama's layout of it names the latent
    projections ``ffn_latent_in``/``ffn_latent_out`` (llama.cpp ``ffn_latent_down``/``ffn_latent_up``), leaves out
    ``moe_latent_size`` and carries a multi-token-prediction layer (``mtp.*``). Plain ``nemotron_h`` is laid out
    alike by both."""
    assert layout in LAYOUTS and arch in ("nemotron_h", "nemotron_h_moe")
    ollama, moe = layout == "ollama", arch == "nemotron_h_moe"
    e, d_inner, d_state, n_group, n_ssm_head, conv = 64, 128, 16, 2, 8, 4
    n_head, n_kv, head, ff, n_exp, ff_exp, latent = 4, 2, 16, 96, 4, 32, 32
    kinds = "MA-M"  # Mamba-2, attention, feed-forward, Mamba-2
    keys: dict[str, Any] = {
        "@block_count": len(kinds), "@context_length": 256, "@embedding_length": e, "@attention.head_count": n_head,
        "@attention.head_count_kv": np.array([n_kv if k == "A" else 0 for k in kinds], np.uint32),
        "@feed_forward_length": np.array([ff if k == "-" else 0 for k in kinds], np.uint32),
        "@attention.key_length": head, "@attention.value_length": head, "@attention.layer_norm_epsilon": 1e-5,
        "@rope.freq_base": 10000.0, "@ssm.conv_kernel": conv, "@ssm.state_size": d_state,
        "@ssm.group_count": n_group, "@ssm.inner_size": d_inner, "@ssm.time_step_rank": n_ssm_head}
    if moe:
        keys.update({"@expert_count": n_exp, "@expert_used_count": 2, "@expert_feed_forward_length": ff_exp,
                     "@expert_shared_feed_forward_length": ff, "@expert_weights_scale": 2.5,
                     "@expert_weights_norm": True, "@expert_gating_func": 2})
        if not ollama:
            keys["@moe_latent_size"] = latent
    conv_dim = d_inner + 2 * n_group * d_state
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il, kind in enumerate(kinds):
        b = f"blk.{il}."
        tensors.append((b + "attn_norm.weight", (e,)))
        if kind == "M":
            tensors += [(b + "ssm_in.weight", (e, 2 * d_inner + 2 * n_group * d_state + n_ssm_head)),
                        (b + "ssm_conv1d.weight", (conv, conv_dim)), (b + "ssm_conv1d.bias", (conv_dim,)),
                        (b + "ssm_dt.bias", (n_ssm_head,)), (b + "ssm_a", (1, n_ssm_head)), (b + "ssm_d", (1, n_ssm_head)),
                        (b + "ssm_norm.weight", (d_inner // n_group, n_group)), (b + "ssm_out.weight", (d_inner, e))]
        elif kind == "A":
            tensors += _attention(b, e, n_head, n_kv, head, qk_norm=False)
        elif moe:
            tensors += [(b + "ffn_gate_inp.weight", (e, n_exp)), (b + "exp_probs_b.bias", (n_exp,)),
                        (b + "ffn_latent_down.weight", (e, latent)), (b + "ffn_up_exps.weight", (latent, ff_exp, n_exp)),
                        (b + "ffn_down_exps.weight", (ff_exp, latent, n_exp)), (b + "ffn_latent_up.weight", (latent, e)),
                        (b + "ffn_up_shexp.weight", (e, ff)), (b + "ffn_down_shexp.weight", (ff, e))]
        else:
            tensors += [(b + "ffn_up.weight", (e, ff)), (b + "ffn_down.weight", (ff, e))]
    if moe:
        tensors.append(("mtp.0.eh_proj.weight", (2 * e, e)))
    names = {".ffn_latent_down": ".ffn_latent_in", ".ffn_latent_up": ".ffn_latent_out"}
    return _tiny(path, arch, vocab_from, keys, tensors, seed, rename=_renamer(names, ollama),
                 skip=lambda name: not ollama and name.startswith("mtp."))


def gemma4(path: Path, vocab_from: Path, layout: str = "upstream", seed: int = 33, *, n_layer: int = 2,
           moe: bool = True, per_layer: int = 0, shared_kv: int = 0, global_head: int = 16, global_kv: int = 2,
           k_eq_v: bool = False, window: int = 8, matrix_type: GGMLQuantizationType | None = None,
           context: int = 256, split_experts: bool = False, extra_keys: dict[str, Any] | None = None) -> Path:
    """A Gemma 4 in small: sliding-window and global layers (every third global, and the last; global ones with
    proportional RoPE by ``rope_freqs``, ``global_head`` dimensions and ``global_kv`` KV heads, without V matrix
    where ``k_eq_v``), by default two layers of 26B-A4B (``moe``: a dense FFN beside routed experts). E2B/E4B-style:
    ``per_layer`` embeddings a layer and the last ``shared_kv`` layers reading earlier layers' KV.
    ``matrix_type``: the matrices quantized to it (else F32). llama.cpp's layout holds each expert's gate and up
    rows in one ``ffn_gate_up_exps`` (apart where ``split_experts``, as llama.cpp also reads them) and the per-expert scale as ``ffn_down_exps.scale``; Ollama's holds gate and
    up apart, the scale as ``ffn_gate_inp.per_expert_scale`` and tokenizer model ``llama`` (its vision encoder:
    :func:`gemma4_encoder`). ``extra_keys``: keys added or replaced (``@`` for ``gemma4.``)."""
    assert layout in LAYOUTS
    ollama = layout == "ollama"
    e, n_head, n_kv, head, ff, n_exp, ff_exp = 64, 4, 2, 16, 96, 4, 32
    n_kv_layers = n_layer - shared_kv  # every third layer global, counted back from the last with KV (as Gemma 4's)
    sliding = [(il - n_kv_layers + 1) % 3 != 0 and il != n_layer - 1 for il in range(n_layer)]
    kv_heads = [n_kv if s else global_kv for s in sliding]
    keys: dict[str, Any] = {
        "@block_count": n_layer, "@context_length": context, "@embedding_length": e, "@feed_forward_length": ff,
        "@attention.head_count": n_head,
        "@attention.head_count_kv": n_kv if global_kv == n_kv else np.array(kv_heads, np.uint32),
        "@attention.key_length": global_head, "@attention.value_length": global_head,
        "@attention.key_length_swa": head, "@attention.value_length_swa": head,
        "@attention.layer_norm_rms_epsilon": 1e-6, "@rope.freq_base": 1e6, "@rope.freq_base_swa": 1e4,
        "@rope.dimension_count": global_head, "@rope.dimension_count_swa": head, "@attention.sliding_window": window,
        "@attention.sliding_window_pattern": np.array(sliding), "@final_logit_softcapping": 30.0,
        "@embedding_length_per_layer_input": per_layer, "@attention.shared_kv_layers": shared_kv}
    if moe:
        keys |= {"@expert_count": n_exp, "@expert_used_count": 2, "@expert_feed_forward_length": ff_exp}
    keys |= extra_keys or {}
    # proportional RoPE: the first quarter of each global head's rotary pairs turn, the rest stand still
    factors = np.array([1.0] * (global_head // 8) + [1e30] * (global_head // 2 - global_head // 8), np.float32)
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,))]
    if per_layer:
        tensors += [("per_layer_token_embd.weight", (per_layer * n_layer, -1)),
                    ("per_layer_model_proj.weight", (e, per_layer * n_layer)), ("per_layer_proj_norm.weight", (per_layer,))]
    for il in range(n_layer):
        b, hd = f"blk.{il}.", head if sliding[il] else global_head
        attention = _attention(b, e, n_head, kv_heads[il], hd)
        if k_eq_v and not sliding[il]:
            attention = [(name, shape) for name, shape in attention if not name.endswith("attn_v.weight")]
        tensors += [(b + "attn_norm.weight", (e,)), *attention,
                    (b + "post_attention_norm.weight", (e,)), (b + "ffn_norm.weight", (e,)), *_dense_ffn(b, e, ff),
                    (b + "post_ffw_norm.weight", (e,)), (b + "layer_output_scale.weight", (1,))]
        if moe:
            tensors += [(b + "ffn_gate_inp.weight", (e, n_exp)), (b + "ffn_gate_inp.scale", (e,)),
                        (b + "ffn_down_exps.weight", (ff_exp, e, n_exp)), (b + "ffn_down_exps.scale", (n_exp,)),
                        (b + "pre_ffw_norm_2.weight", (e,)), (b + "post_ffw_norm_1.weight", (e,)),
                        (b + "post_ffw_norm_2.weight", (e,))]
        if per_layer:
            tensors += [(b + "inp_gate.weight", (e, per_layer)), (b + "proj.weight", (per_layer, e)),
                        (b + "post_norm.weight", (e,))]
    rng = np.random.default_rng(seed + 1)
    given: dict[str, np.ndarray] = {"rope_freqs.weight": factors} if not all(sliding) else {}
    for il in range(n_layer if moe else 0):
        gate, up = (rng.standard_normal((n_exp, ff_exp, e)) * 0.3 for _ in range(2))
        apart = {f"blk.{il}.ffn_gate_exps.weight": gate, f"blk.{il}.ffn_up_exps.weight": up}
        given |= apart if ollama or split_experts else {f"blk.{il}.ffn_gate_up_exps.weight": np.concatenate([gate, up], 1)}
    return _tiny(path, "gemma4", vocab_from, keys, tensors, seed, tokenizer_model="llama" if ollama else "gemma4",
                 rename=_renamer({".ffn_down_exps.scale": ".ffn_gate_inp.per_expert_scale"}, ollama), given=given,
                 matrix_type=matrix_type)


# --- vision (and audio) encoders that Ollama's files carry inside the model file -----------------------------

def qwen_vl(path: Path, vocab_from: Path, arch: str, seed: int = 35) -> Path:
    """The language model of Qwen2.5-VL (``qwen2vl``: Qwen 2 with M-RoPE sections) or Qwen3-VL (``qwen3vl``: Qwen 3
    with the sections Ollama's translation states and one deepstack layer), as llama.cpp lays them out."""
    assert arch in ("qwen2vl", "qwen3vl")
    qwen3 = arch == "qwen3vl"
    e, ff, n_head, n_kv, head = (64, 96, 2, 1, 128) if qwen3 else (64, 96, 4, 2, 16)
    keys: dict[str, Any] = {
        "@block_count": 2, "@context_length": 1024, "@embedding_length": e, "@feed_forward_length": ff,
        "@attention.head_count": n_head, "@attention.head_count_kv": n_kv, "@attention.layer_norm_rms_epsilon": 1e-6,
        "@rope.freq_base": 10000.0,
        "@rope.dimension_sections": np.array([24, 20, 20, 0] if qwen3 else [2, 3, 3, 0], np.int32)}
    if qwen3:
        keys.update({"@attention.key_length": head, "@attention.value_length": head, "@n_deepstack_layers": 1})
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il in range(2):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,)), *_attention(b, e, n_head, n_kv, head, qk_norm=qwen3),
                    (b + "ffn_norm.weight", (e,)), *_dense_ffn(b, e, ff)]
        if not qwen3:
            tensors += [(b + "attn_q.bias", (n_head * head,)), (b + "attn_k.bias", (n_kv * head,)),
                        (b + "attn_v.bias", (n_kv * head,))]
    return _tiny(path, arch, vocab_from, keys, tensors, seed, pre="qwen2")


class Encoder:
    """A vision (and audio) encoder by llama.cpp's names and ``clip.*`` keys (its mmproj), and how Ollama's
    converter lays the same weights out inside the model file: ``<arch>.*`` keys and its own tensor names."""

    def __init__(self, projector_keys: dict[str, Any], ollama_keys: dict[str, Any], seed: int) -> None:
        self.projector_keys, self.ollama_keys = projector_keys, ollama_keys
        self.upstream: dict[str, np.ndarray] = {}  # llama.cpp's name -> data (numpy shape)
        self.ollama: dict[str, np.ndarray] = {}  # Ollama's name -> data as its file holds it
        self.rng = np.random.default_rng(seed)

    def add(self, name: str, *shape: int, ollama: str | None = None, scale: float = 0.2, norm: bool = False,
            f16: bool = False) -> np.ndarray:
        """A random tensor (numpy shape) under llama.cpp's ``name`` and Ollama's (``ollama``, default the same);
        ``f16``: Ollama's file holds it in F16 (the projector in F32, so rounded through F16)."""
        data = (self.rng.standard_normal(shape) * scale + (1.0 if norm else 0.0)).astype(np.float32)
        if f16:
            data = data.astype(np.float16).astype(np.float32)
        self.upstream[name] = data
        if ollama != "":
            self.ollama[ollama or name] = data.astype(np.float16) if f16 else data
        return data

    def mmproj(self, path: Path) -> Path:
        w = GGUFWriter(str(path), "clip")
        _add_keys(w, "clip", self.projector_keys)
        for name, data in self.upstream.items():
            w.add_tensor(name, data)
        return _finish(w, path)

    def inside(self, language_model: Path, path: Path, arch: str, left_out: tuple[str, ...] = ()) -> Path:
        """``language_model`` (llama.cpp's layout) with this encoder inside, as Ollama ships it: architecture
        ``arch``, the language model's ``left_out`` keys (``@`` for its architecture) not written."""
        header = read_gguf(language_model)
        own = f"{header.architecture}."
        skipped = {key.replace("@", own, 1) for key in left_out} | {  # a stand-in encoder's
            key for key in header.metadata if key.startswith((f"{own}vision.", f"{own}audio."))}
        w = GGUFWriter(str(path), arch)
        for key, value in header.metadata.items():
            if key != "general.architecture" and not key.startswith("GGUF.") and key not in skipped:
                kind, item = header.value_types[key]
                w.add_key_value(f"{arch}.{key[len(own):]}" if key.startswith(own) else key, value, GGUFValueType(kind),
                                sub_type=None if item is None else GGUFValueType(item))
        _add_keys(w, arch, self.ollama_keys)
        from gguf import GGUFReader
        for tensor in GGUFReader(str(language_model)).tensors:
            if not tensor.name.startswith(("v.", "mm.", "a.")):
                w.add_tensor(tensor.name, np.array(tensor.data), raw_dtype=tensor.tensor_type)
        for name, data in self.ollama.items():
            w.add_tensor(name, data)
        return _finish(w, path)


def _vit_block(enc: Encoder, b: str, hidden: int, ff: int, names: dict[str, str], qkv: str = "split",
               gated: bool = False, bias_norm: bool = True) -> None:
    """One ViT block under llama.cpp's names (``names``: Ollama's leaves for them). ``qkv="fused"``: llama.cpp
    reads one QKV matrix that Ollama's file holds as three."""
    def o(name: str) -> str:
        for ours, theirs in names.items():
            name = name.replace(ours, theirs)
        return name

    for norm in ("ln1", "ln2"):
        enc.add(f"{b}{norm}.weight", hidden, ollama=o(f"{b}{norm}.weight"), norm=True)
        if bias_norm:
            enc.add(f"{b}{norm}.bias", hidden, ollama=o(f"{b}{norm}.bias"))
    if qkv == "fused":
        for kind, shape in (("weight", (hidden, hidden)), ("bias", (hidden,))):
            parts = [enc.add(f"{b}attn_{x}.{kind}", *shape, ollama=f"{b}attn_{x}.{kind}") for x in "qkv"]
            for x in "qkv":
                del enc.upstream[f"{b}attn_{x}.{kind}"]
            enc.upstream[f"{b}attn_qkv.{kind}"] = np.concatenate(parts, axis=0)
    else:
        for x in "qkv":
            enc.add(f"{b}attn_{x}.weight", hidden, hidden)
            enc.add(f"{b}attn_{x}.bias", hidden)
    enc.add(f"{b}attn_out.weight", hidden, hidden, ollama=o(f"{b}attn_out.weight"))
    enc.add(f"{b}attn_out.bias", hidden, ollama=o(f"{b}attn_out.bias"))
    ups = ("ffn_gate", "ffn_up") if gated else ("ffn_up",)
    for proj in ups:
        enc.add(f"{b}{proj}.weight", ff, hidden, ollama=o(f"{b}{proj}.weight"))
        enc.add(f"{b}{proj}.bias", ff, ollama=o(f"{b}{proj}.bias"))
    enc.add(f"{b}ffn_down.weight", hidden, ff, ollama=o(f"{b}ffn_down.weight"))
    enc.add(f"{b}ffn_down.bias", hidden, ollama=o(f"{b}ffn_down.bias"))


def qwen25vl_encoder(n_embd: int = 64, seed: int = 37) -> Encoder:
    """A two-block Qwen2.5-VL encoder (4-pixel patches in two frames, 2x2 merge, window attention then full)."""
    hidden, ff, n_head, patch = 16, 32, 2, 4
    vision = {"block_count": 2, "embedding_length": hidden, "attention.head_count": n_head, "patch_size": patch,
              "spatial_merge_size": 2, "window_size": 16, "attention.layer_norm_epsilon": 1e-6, "num_channels": 3}
    enc = Encoder({"@projector_type": "qwen2.5vl_merger", "@has_vision_encoder": True, "@use_silu": True,
                   **{f"@vision.{k}": v for k, v in vision.items()}, "@vision.feed_forward_length": ff,
                   "@vision.n_wa_pattern": 2, "@vision.image_size": 560, "@vision.projection_dim": n_embd,
                   "@vision.image_mean": np.array([0.48145466, 0.4578275, 0.40821073], np.float32),
                   "@vision.image_std": np.array([0.26862954, 0.26130258, 0.27577711], np.float32)},
                  {**{f"@vision.{k}": v for k, v in vision.items()},
                   "@vision.fullatt_block_indexes": np.array([1], np.int32)}, seed)
    enc.add("v.patch_embd.weight", hidden, 3, patch, patch, ollama="v.patch_embd_0.weight", f16=True)
    enc.add("v.patch_embd.weight.1", hidden, 3, patch, patch, ollama="v.patch_embd_1.weight", f16=True)
    for block in range(2):
        _vit_block(enc, f"v.blk.{block}.", hidden, ff, {}, gated=True, bias_norm=False)
    enc.add("v.post_ln.weight", hidden, ollama="v.merger.ln_q.weight", norm=True)
    enc.add("mm.0.weight", 4 * hidden, 4 * hidden, ollama="v.merger.mlp.0.weight")
    enc.add("mm.0.bias", 4 * hidden, ollama="v.merger.mlp.0.bias")
    enc.add("mm.2.weight", n_embd, 4 * hidden, ollama="v.merger.mlp.2.weight")
    enc.add("mm.2.bias", n_embd, ollama="v.merger.mlp.2.bias")
    return enc


def qwen3vl_encoder(n_embd: int = 64, deepstack: bool = True, seed: int = 39) -> Encoder:
    """A two-block Qwen3-VL encoder (Qwen 3.5's without the ``deepstack`` adapter after block 0): a learned
    position grid of 8x8 patches, 4-pixel patches in two frames, 2x2 merge. Ollama's file holds the patch
    embedding as one F16 Conv3D weight, Q, K and V apart, and Hugging Face's leaf names."""
    hidden, ff, n_head, patch = 16, 32, 2, 4
    vision = {"block_count": 2, "embedding_length": hidden, "attention.head_count": n_head, "patch_size": patch,
              "spatial_merge_size": 2, "attention.layer_norm_epsilon": 1e-6, "num_channels": 3}
    extra = {"temporal_patch_size": 2, "rope.freq_base": 10000.0} if deepstack else {}
    pixels = {"image_min_pixels": 65536, "image_max_pixels": 16777216} if deepstack else {}
    enc = Encoder({"@projector_type": "qwen3vl_merger", "@has_vision_encoder": True, "@use_gelu": True,
                   **{f"@vision.{k}": v for k, v in {**vision, **extra, **pixels}.items()},
                   "@vision.feed_forward_length": ff, "@vision.image_size": 8 * patch, "@vision.projection_dim": n_embd,
                   "@vision.image_mean": np.array([0.5] * 3, np.float32),
                   "@vision.image_std": np.array([0.5] * 3, np.float32),
                   "@vision.is_deepstack_layers": np.array([deepstack, False])},
                  {**{f"@vision.{k}": v for k, v in {**vision, **extra}.items()},
                   **({"@vision.deepstack_visual_indexes": np.array([0], np.int32)} if deepstack else {})}, seed)
    frames = [enc.add(f"v.patch_embd.weight{suffix}", hidden, 3, patch, patch, ollama="", f16=True)
              for suffix in ("", ".1")]
    enc.ollama["v.patch_embed.weight"] = np.stack(frames, axis=2).reshape(hidden * 3, 2, patch, patch).astype(np.float16)
    enc.add("v.patch_embd.bias", hidden, ollama="v.patch_embed.bias")
    enc.add("v.position_embd.weight", 64, hidden, ollama="v.pos_embed.weight")
    names = {".ln1": ".norm1", ".ln2": ".norm2", ".ffn_up": ".mlp.linear_fc1", ".ffn_down": ".mlp.linear_fc2"}
    for block in range(2):
        _vit_block(enc, f"v.blk.{block}.", hidden, ff, names, qkv="fused")
    enc.add("v.post_ln.weight", hidden, ollama="v.merger.norm.weight", norm=True)
    enc.add("v.post_ln.bias", hidden, ollama="v.merger.norm.bias")
    merged = 4 * hidden
    for ours, theirs, rows in (("mm.0", "v.merger.linear_fc1", merged), ("mm.2", "v.merger.linear_fc2", n_embd)):
        enc.add(f"{ours}.weight", rows, merged, ollama=f"{theirs}.weight")
        enc.add(f"{ours}.bias", rows, ollama=f"{theirs}.bias")
    if deepstack:
        enc.add("v.deepstack.0.norm.weight", merged, ollama="v.deepstack_merger.0.norm.weight", norm=True)
        enc.add("v.deepstack.0.norm.bias", merged, ollama="v.deepstack_merger.0.norm.bias")
        for ours, theirs, rows in (("fc1", "linear_fc1", merged), ("fc2", "linear_fc2", n_embd)):
            enc.add(f"v.deepstack.0.{ours}.weight", rows, merged, ollama=f"v.deepstack_merger.0.{theirs}.weight")
            enc.add(f"v.deepstack.0.{ours}.bias", rows, ollama=f"v.deepstack_merger.0.{theirs}.bias")
    return enc


def glm4v_encoder(n_embd: int = 64, seed: int = 41) -> Encoder:
    """A one-block GLM-OCR encoder (``glm4v``): RMS-normed ViT with 2D M-RoPE, a 2x2 downsampling convolution
    and a SwiGLU merger. Ollama's file names the two patch-embedding frames ``_0``/``_1`` and keeps them in F16,
    and states the merger's widths as ``intermediate_size`` and ``out_hidden_size``."""
    hidden, ff, n_head, patch, merged_ff = 16, 32, 2, 4, 48
    vision = {"block_count": 1, "embedding_length": hidden, "attention.head_count": n_head, "patch_size": patch,
              "spatial_merge_size": 2, "image_size": 32}
    enc = Encoder({"@projector_type": "glm4v", "@has_vision_encoder": True, "@use_silu": True,
                   **{f"@vision.{k}": v for k, v in vision.items()}, "@vision.feed_forward_length": ff,
                   "@vision.attention.layer_norm_epsilon": 1e-5, "@vision.projection_dim": n_embd,
                   "@vision.image_mean": np.array([0.5] * 3, np.float32), "@vision.image_std": np.array([0.5] * 3, np.float32)},
                  {**{f"@vision.{k}": v for k, v in vision.items()}, "@vision.intermediate_size": ff,
                   "@vision.attention.layer_norm_rms_epsilon": 1e-5, "@vision.out_hidden_size": n_embd,
                   "@vision.image_mean": np.array([0.5] * 3, np.float32), "@vision.image_std": np.array([0.5] * 3, np.float32)},
                  seed)
    enc.add("v.patch_embd.weight", hidden, 3, patch, patch, ollama="v.patch_embd_0.weight", f16=True)
    enc.add("v.patch_embd.weight.1", hidden, 3, patch, patch, ollama="v.patch_embd_1.weight", f16=True)
    enc.add("v.patch_embd.bias", hidden)
    enc.add("v.post_conv_ln.weight", hidden, norm=True)
    enc.add("v.position_embd.weight", 64, hidden)
    b = "v.blk.0."
    enc.add(b + "ln1.weight", hidden, norm=True)
    enc.add(b + "attn_qkv.weight", 3 * hidden, hidden)
    enc.add(b + "attn_qkv.bias", 3 * hidden)
    enc.add(b + "attn_out.weight", hidden, hidden)
    enc.add(b + "ln2.weight", hidden, norm=True)
    for proj in ("ffn_gate", "ffn_up"):
        enc.add(f"{b}{proj}.weight", ff, hidden)
    enc.add(b + "ffn_down.weight", hidden, ff)
    enc.add("v.post_ln.weight", hidden, norm=True)
    enc.add("mm.patch_merger.weight", n_embd, hidden, 2, 2)
    enc.add("mm.patch_merger.bias", n_embd)
    enc.add("mm.model.fc.weight", n_embd, n_embd)
    enc.add("mm.post_norm.weight", n_embd, norm=True)
    enc.add("mm.post_norm.bias", n_embd)
    for proj in ("mm.gate", "mm.up"):
        enc.add(f"{proj}.weight", merged_ff, n_embd)
    enc.add("mm.down.weight", n_embd, merged_ff)
    return enc


def gemma4_encoder(n_embd: int = 64, seed: int = 43) -> Encoder:
    """A one-block Gemma 4 vision encoder (``gemma4v``: RMS-normed ViT with per-head Q/K norms, x and y
    position tables, average pooling, a projection after an RMS norm, every linear clamped), by llama.cpp's names
    in both layouts; Ollama's file holds the patch embedding in F16, the clamps packed in ``v.clamp_data``, and
    leaves the image size and normalisation to defaults."""
    hidden, ff, n_head, patch = 16, 32, 2, 4
    vision = {"block_count": 1, "embedding_length": hidden, "feed_forward_length": ff, "attention.head_count": n_head,
              "patch_size": patch, "attention.layer_norm_epsilon": 1e-6}
    enc = Encoder({"@vision.projector_type": "gemma4v", "@has_vision_encoder": True,
                   **{f"@vision.{k}": v for k, v in vision.items()}, "@vision.image_size": 224,
                   "@vision.projection_dim": n_embd, "@vision.image_mean": np.array([0.0] * 3, np.float32),
                   "@vision.image_std": np.array([1.0] * 3, np.float32)},
                  {f"@vision.{k}": v for k, v in vision.items()}, seed)
    enc.add("v.patch_embd.weight", hidden, 3, patch, patch, f16=True)
    enc.add("v.position_embd.weight", 2, 256, hidden)
    b = "v.blk.0."
    for name, shape in (("ln1.weight", (hidden,)), ("attn_q.weight", (hidden, hidden)), ("attn_k.weight", (hidden, hidden)),
                        ("attn_v.weight", (hidden, hidden)), ("attn_q_norm.weight", (hidden // n_head,)),
                        ("attn_k_norm.weight", (hidden // n_head,)), ("attn_out.weight", (hidden, hidden)),
                        ("ln2.weight", (hidden,)), ("ffn_gate.weight", (ff, hidden)), ("ffn_up.weight", (ff, hidden)),
                        ("ffn_down.weight", (hidden, ff))):
        enc.add(b + name, *shape, norm=name.endswith("norm.weight") or name.startswith("ln"))
    enc.add("mm.input_projection.weight", n_embd, hidden)
    rows = []  # each linear clamps its input and output: llama.cpp's scalars by name, Ollama's packed table
    for linear in [b + name for name in GEMMA4_CLAMPED] + ["mm.input_projection"]:
        rows.append((enc.rng.uniform(1.0, 3.0, 4) * [-1, 1, -1, 1]).astype(np.float32))
        for bound, value in zip(CLAMP_BOUNDS, rows[-1]):
            enc.upstream[f"{linear}.{bound}"] = np.array([value], np.float32)
    enc.ollama["v.clamp_data"] = np.concatenate(rows)
    return enc


def gemma4_audio(enc: Encoder, n_embd: int = 64) -> Encoder:
    """Gemma 4's conformer audio encoder (``gemma4a``) added to ``enc``: two stride-2 convolutions over 128 mel
    bins with channel norms, one conformer block (half-step FFNs, chunked attention with relative positions,
    a gated depthwise convolution), the output projection and the embedder into the language model. llama.cpp's
    names, and Ollama's where its converter writes others (``ln1``, ``ln2``, ``layer_pre_norm``,
    ``linear_pos``, the SSCP projection as ``a.pre_encode.out`` and the output projection as ``mm.a.fc``);
    the query projection clamps its input and output (a ClippableLinear's scalars, in both files by name).
    One block, 16 wide in 2 heads: the smallest that runs every part of the graph."""
    hidden, n_head, channels, out_dims = 16, 2, (4, 4), 24
    audio = {"block_count": 1, "embedding_length": hidden, "feed_forward_length": 4 * hidden,
             "attention.head_count": n_head, "attention.layer_norm_epsilon": 1e-6}
    enc.projector_keys |= {"@has_audio_encoder": True, "@audio.projector_type": "gemma4a",
                           **{f"@audio.{k}": v for k, v in audio.items()}, "@audio.num_mel_bins": 128,
                           "@audio.projection_dim": n_embd}
    enc.ollama_keys |= {f"@audio.{k}": v for k, v in audio.items()} | {"@audio.conv_kernel_size": 5}
    enc.add("a.conv1d.0.weight", channels[0], 1, 3, 3)
    enc.add("a.conv1d.0.norm.weight", channels[0], norm=True)
    enc.add("a.conv1d.1.weight", channels[1], channels[0], 3, 3)
    enc.add("a.conv1d.1.norm.weight", channels[1], norm=True)
    enc.add("a.input_projection.weight", hidden, channels[1] * 32, ollama="a.pre_encode.out.weight")
    b = "a.blk.0."
    for ffn in ("", "_1"):
        enc.add(f"{b}ffn_norm{ffn}.weight", hidden, norm=True)
        enc.add(f"{b}ffn_up{ffn}.weight", 4 * hidden, hidden)
        enc.add(f"{b}ffn_down{ffn}.weight", hidden, 4 * hidden)
        enc.add(f"{b}ffn_post_norm{ffn}.weight", hidden, norm=True)
    enc.add(b + "attn_pre_norm.weight", hidden, norm=True, ollama=b + "ln1.weight")
    for x in ("q", "k", "v", "out"):
        enc.add(f"{b}attn_{x}.weight", hidden, hidden)
    for bound, value in (("input_min", -0.5), ("input_max", 0.5), ("output_min", -0.4), ("output_max", 0.4)):
        enc.upstream[f"{b}attn_q.{bound}"] = enc.ollama[f"{b}attn_q.{bound}"] = np.array([value], np.float32)
    enc.add(b + "per_dim_scale.weight", hidden // n_head, norm=True)
    enc.add(b + "attn_k_rel.weight", hidden, hidden, ollama=b + "linear_pos.weight")
    enc.add(b + "attn_post_norm.weight", hidden, norm=True, ollama=b + "ln2.weight")
    enc.add(b + "conv_norm.weight", hidden, norm=True)  # before the convolution module (its names are swapped)
    enc.add(b + "conv_pw1.weight", 2 * hidden, hidden)
    enc.add(b + "conv_dw.weight", hidden, 5)
    enc.add(b + "norm_conv.weight", hidden, norm=True)
    enc.add(b + "conv_pw2.weight", hidden, hidden)
    enc.add(b + "ln2.weight", hidden, norm=True, ollama=b + "layer_pre_norm.weight")
    enc.add("a.pre_encode.out.weight", out_dims, hidden, ollama="mm.a.fc.weight")
    enc.add("a.pre_encode.out.bias", out_dims, ollama="mm.a.fc.bias")
    enc.add("mm.a.input_projection.weight", n_embd, out_dims)
    return enc


def gemma4_hearing(directory: Path) -> tuple[Path, Path, Path]:
    """Gemma 4 with its vision and audio encoders: the upstream pair (language model, mmproj with both) and
    Ollama's one file that carries them, the same weights."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = byte_vocabulary(directory / "vocab.gguf")
    encoder = gemma4_audio(gemma4_encoder())
    model = gemma4(directory / "lm.gguf", vocab)
    one = encoder.inside(gemma4(directory / "lm-ollama.gguf", vocab, layout="ollama"), directory / "one.gguf", "gemma4")
    return model, encoder.mmproj(directory / "mmproj.gguf"), one


def vision_family(directory: Path, family: str) -> tuple[Path, Path, Path]:
    """The upstream pair (language model, mmproj) and Ollama's one file of ``family``, the same weights."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = byte_vocabulary(directory / "vocab.gguf")
    if family in ("qwen25vl", "qwen3vl", "llama4"):  # Ollama lays out these language models as llama.cpp does
        model = (llama4(directory / "lm.gguf", vocab) if family == "llama4"
                 else qwen_vl(directory / "lm.gguf", vocab, "qwen2vl" if family == "qwen25vl" else "qwen3vl"))
        language_in_ollama_layout = model
    else:
        builder = {"qwen35": lambda path, **kw: qwen_hybrid(path, vocab, "qwen35", **kw),
                   "glmocr": lambda path, **kw: glm_ocr(path, vocab, **kw),
                   "gemma4": lambda path, **kw: gemma4(path, vocab, **kw)}[family]
        model = builder(directory / "lm.gguf")
        language_in_ollama_layout = builder(directory / "lm-ollama.gguf", layout="ollama")
    encoder = {"qwen25vl": qwen25vl_encoder, "qwen3vl": qwen3vl_encoder,
               "qwen35": lambda: qwen3vl_encoder(deepstack=False),
               "glmocr": glm4v_encoder, "gemma4": gemma4_encoder, "llama4": llama4_encoder}[family]()
    left_out: tuple[str, ...] = ()
    if family == "qwen25vl":  # Ollama's file states three M-RoPE sections under its own key
        encoder.ollama_keys["@rope.mrope_section"] = np.array([2, 3, 3], np.int32)
        left_out = ("@rope.dimension_sections",)
    elif family == "qwen3vl":  # the sections and the deepstack count are the translation's
        left_out = ("@rope.dimension_sections", "@n_deepstack_layers")
    one = encoder.inside(language_in_ollama_layout, directory / "one.gguf", family, left_out)
    return model, encoder.mmproj(directory / "mmproj.gguf"), one


def libmtmd_logits(model: Path, projector: Path, prompt: str, rgb: bytes = b"", width: int = 0, height: int = 0,
                   media_file: bytes | None = None) -> np.ndarray:
    """The next-token logits after ``prompt`` with one image (RGB bytes), or one ``media_file`` (an audio or
    image file, decoded by libmtmd's helper), at its ``<__media__>`` marker, as llama-cpp-python's libmtmd path
    computes them (libmtmd lays out M-RoPE positions itself)."""
    import ctypes

    import llama_cpp
    import llama_cpp.mtmd_cpp as mtmd

    llm = llama_cpp.Llama(str(model), n_ctx=512, n_batch=512, n_threads=1, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup, params.media_marker = False, 1, False, b"<__media__>"
    ctx = mtmd.mtmd_init_from_file(str(projector).encode(), llm.model, params)
    assert ctx, f"libmtmd refused {projector}"
    if media_file is None:
        bitmap = mtmd.mtmd_bitmap_init(width, height, (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb))
    else:
        buf = (ctypes.c_uint8 * len(media_file)).from_buffer_copy(media_file)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(media_file), False)
    assert bitmap, "libmtmd refused the medium"
    chunks = mtmd.mtmd_input_chunks_init()
    try:
        text = prompt.encode()
        inp = mtmd.mtmd_input_text()
        inp.text, inp.text_len, inp.add_special, inp.parse_special = text, len(text), True, True
        assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
        n_past = llama_cpp.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(ctx, llm.ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)) == 0
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llm.model))
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)).copy()
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        mtmd.mtmd_free(ctx)
        llm.close()


def llama4(path: Path, vocab_from: Path, seed: int = 45) -> Path:
    """A four-layer Llama 4 (every layer routed experts beside a shared one; chunked attention, the fourth layer
    global and without RoPE: llama.cpp's step, whose attention-temperature input needs such a layer)
    as llama.cpp lays it out; Ollama's file is the same with the encoder inside (:func:`llama4_encoder`)."""
    e, n_head, n_kv, head, n_exp, ff_exp = 64, 4, 2, 16, 4, 32
    keys: dict[str, Any] = {
        "@block_count": 4, "@context_length": 1024, "@embedding_length": e, "@feed_forward_length": ff_exp,
        "@attention.head_count": n_head, "@attention.head_count_kv": n_kv, "@attention.key_length": head,
        "@attention.value_length": head, "@rope.dimension_count": head, "@attention.layer_norm_rms_epsilon": 1e-5,
        "@rope.freq_base": 500000.0, "@expert_count": n_exp, "@expert_used_count": 1,
        "@expert_feed_forward_length": ff_exp, "@interleave_moe_layer_step": 1}
    tensors: list[tuple[str, Shape]] = [("token_embd.weight", (e, -1)), ("output_norm.weight", (e,)),
                                        ("output.weight", (e, -1))]
    for il in range(4):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,)), *_attention(b, e, n_head, n_kv, head, qk_norm=False),
                    (b + "ffn_norm.weight", (e,)), (b + "ffn_gate_inp.weight", (e, n_exp)),
                    (b + "ffn_gate_exps.weight", (e, ff_exp, n_exp)), (b + "ffn_up_exps.weight", (e, ff_exp, n_exp)),
                    (b + "ffn_down_exps.weight", (ff_exp, e, n_exp)), *_shared_expert(b, e, ff_exp)]
    return _tiny(path, "llama4", vocab_from, keys, tensors, seed, pre="llama4")


def llama4_encoder(n_embd: int = 64, seed: int = 47) -> Encoder:
    """A one-block Llama 4 encoder (an unfolding patch projection, a [CLS] token, learned positions and 2D RoPE,
    a pixel shuffle by 2, a two-layer adapter and the projection). Ollama's file names its parts as Hugging
    Face does (``v.patch_embedding``, ``v.positional_embedding_vlm``, ``mm.linear_1``, ...)."""
    hidden, ff, n_head, patch, side, adapter = 16, 32, 2, 4, 8, 24
    vision = {"block_count": 1, "embedding_length": hidden, "feed_forward_length": ff, "attention.head_count": n_head,
              "image_size": side * patch, "patch_size": patch}
    enc = Encoder({"@projector_type": "llama4", "@vision.projector_type": "llama4", "@has_vision_encoder": True,
                   "@use_gelu": True, **{f"@vision.{k}": v for k, v in vision.items()},
                   "@vision.attention.layer_norm_epsilon": 1e-5, "@vision.projection_dim": n_embd,
                   "@vision.projector.scale_factor": 2, "@vision.image_mean": np.array([0.5] * 3, np.float32),
                   "@vision.image_std": np.array([0.5] * 3, np.float32)},
                  {**{f"@vision.{k}": v for k, v in vision.items()}, "@vision.layer_norm_epsilon": 1e-5,
                   "@vision.pixel_shuffle_ratio": 0.5}, seed)
    enc.add("v.patch_embd.weight", hidden, 3 * patch * patch, ollama="v.patch_embedding.weight")
    enc.add("v.class_embd", hidden, ollama="v.class_embedding")
    enc.add("v.position_embd.weight", side * side + 1, hidden, ollama="v.positional_embedding_vlm")
    enc.add("v.pre_ln.weight", hidden, ollama="v.layernorm_pre.weight", norm=True)
    enc.add("v.pre_ln.bias", hidden, ollama="v.layernorm_pre.bias")
    enc.add("v.post_ln.weight", hidden, ollama="v.layernorm_post.weight", norm=True)
    enc.add("v.post_ln.bias", hidden, ollama="v.layernorm_post.bias")
    _vit_block(enc, "v.blk.0.", hidden, ff, {".attn_out": ".attn_output", ".ln1": ".attn_norm", ".ln2": ".ffn_norm",
                                             ".ffn_up": ".mlp.fc1", ".ffn_down": ".mlp.fc2"})
    enc.add("mm.model.mlp.1.weight", adapter, 4 * hidden, ollama="v.vision_adapter.mlp.fc1.weight")
    enc.add("mm.model.mlp.2.weight", adapter, adapter, ollama="v.vision_adapter.mlp.fc2.weight")
    enc.add("mm.model.fc.weight", n_embd, adapter, ollama="mm.linear_1.weight")
    return enc
