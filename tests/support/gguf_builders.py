"""Small but complete GGUF models written by the tests (gguf-py's writer), for paths
that need a model of a particular shape or type rather than the real fixtures."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, quants

from localllm.gguf import read_gguf

F32, F16 = 0, 1  # general.file_type values


def tiny_model(
    path: Path, arch: str = "llama", q_rows: int | None = None, file_type: int = F32,
    extra: Callable[[GGUFWriter], None] | None = None, head_dim: int = 16,
    n_embd: int = 64, n_ff: int = 128, n_vocab: int = 32, n_layer: int = 1, vocab_from: Path | None = None,
    seed: int = 0, context_length: int = 128, quantize: dict[str, GGMLQuantizationType] | None = None,
) -> Path:  # fmt: skip
    """A GGUF of ``arch`` (llama, qwen2: + q/k/v biases, qwen3: + q/k norms, phi3: fused
    attn_qkv and gate+up in ffn_up) with random weights and a SentencePiece vocabulary,
    so llama.cpp loads it too.  Four query heads and two KV heads of ``head_dim`` (other than
    n_embd / 4: wider than embedding/heads, as Mistral Nemo's, stated by attention.key_length); ``q_rows``
    other than 4 * head_dim breaks attn_q's shape; ``extra`` adds keys or tensors to the writer.
    Big ones (the benchmark's ~1B model) are written through a temporary file, tensor by tensor.
    ``vocab_from``: a GGUF whose tokenizer (tokens, merges, special ids) replaces the made-up one,
    and whose vocabulary size replaces ``n_vocab``. ``context_length``: the trained context. gemma3 and gemma-embedding get their
    extra norms (q/k, post-attention, post-FFN). ``quantize``: matrices whose names end with a key written in
    that type (gguf-py's quantizer), e.g. ``{"ffn_up.weight": MXFP4}``; the others as ``file_type`` says."""
    w = GGUFWriter(str(path), arch, use_temp_file=n_layer > 1)
    e, ff, vocab = n_embd, n_ff, n_vocab
    q_dim, kv_dim = 4 * head_dim, 2 * head_dim
    q_rows = q_dim if q_rows is None else q_rows
    w.add_block_count(n_layer)
    w.add_context_length(context_length)
    w.add_embedding_length(e)
    w.add_feed_forward_length(ff)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    if head_dim != e // 4:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(file_type)
    if vocab_from is None:
        w.add_tokenizer_model("llama")
        w.add_token_list(["<unk>", "<s>", "</s>"] + [f"\u2581w{i}" for i in range(vocab - 3)])
        w.add_token_scores([0.0] * 3 + [-float(i) for i in range(vocab - 3)])
        w.add_token_types([2, 3, 3] + [1] * (vocab - 3))  # unknown, control, control, normal...
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    else:
        vocab = _copy_tokenizer(vocab_from, w)
    rng = np.random.default_rng(seed)

    def t(name: str, *shape: int) -> None:
        data = rng.standard_normal(shape[::-1]).astype(np.float32)
        qtype = next((q for suffix, q in (quantize or {}).items() if name.endswith(suffix)), None)
        if qtype is not None and len(shape) > 1:
            w.add_tensor(name, quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data.astype(np.float16) if file_type == F16 and len(shape) > 1 else data)

    t("token_embd.weight", e, vocab)
    t("output_norm.weight", e)
    for il in range(n_layer):
        _layer(t, f"blk.{il}.", arch, e, ff, q_rows, q_dim, kv_dim, head_dim)
    if extra is not None:
        extra(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _layer(t: Callable[..., None], blk: str, arch: str, e: int, ff: int, q_rows: int, q_dim: int, kv_dim: int,
           head_dim: int) -> None:
    t(f"{blk}attn_norm.weight", e)
    if arch == "phi3":
        t(f"{blk}attn_qkv.weight", e, q_rows + 2 * kv_dim)
    else:
        t(f"{blk}attn_q.weight", e, q_rows)
        t(f"{blk}attn_k.weight", e, kv_dim)
        t(f"{blk}attn_v.weight", e, kv_dim)
    if arch == "qwen2":
        t(f"{blk}attn_q.bias", q_dim)
        t(f"{blk}attn_k.bias", kv_dim)
        t(f"{blk}attn_v.bias", kv_dim)
    gemma = arch in ("gemma3", "gemma-embedding")
    if arch == "qwen3" or gemma:
        t(f"{blk}attn_q_norm.weight", head_dim)
        t(f"{blk}attn_k_norm.weight", head_dim)
    t(f"{blk}attn_output.weight", q_dim, e)
    if gemma:
        t(f"{blk}post_attention_norm.weight", e)
        t(f"{blk}post_ffw_norm.weight", e)
    t(f"{blk}ffn_norm.weight", e)
    if arch == "phi3":
        t(f"{blk}ffn_up.weight", e, 2 * ff)
    else:
        t(f"{blk}ffn_gate.weight", e, ff)
        t(f"{blk}ffn_up.weight", e, ff)
    t(f"{blk}ffn_down.weight", ff, e)


def embedding_model(path: Path, arch: str, vocab_from: Path, pooling: int | None = None, dense: bool = False,
                    sliding_window: int = 4) -> Path:
    """A two-layer decoder embedding model with ``vocab_from``'s vocabulary (SmolLM2's BPE for the tests) and
    ``pooling`` (a llama_pooling_type) as ``<arch>.pooling_type``: llama as SmolLM2, qwen3 as Qwen3-Embedding
    (last-token pooling), gemma-embedding as embeddinggemma (non-causal attention, a symmetric
    ``sliding_window`` on its first layer, and with ``dense`` sentence-transformers' two dense
    projections after pooling: dense_2 n_embd -> 2 n_embd, dense_3 back)."""
    from gguf import PoolingType

    n_embd = 64

    def extra(w: GGUFWriter) -> None:
        if pooling is not None:
            w.add_pooling_type(PoolingType(pooling))
        if arch == "gemma-embedding":  # layer 0 sliding, layer 1 global (llama.cpp needs one of each)
            w.add_sliding_window(sliding_window)
            w.add_sliding_window_pattern(2)
        if dense:
            rng = np.random.default_rng(7)
            w.add_dense_features_dims("dense_2", n_embd, 2 * n_embd)
            w.add_dense_features_dims("dense_3", 2 * n_embd, n_embd)
            w.add_tensor("dense_2.weight", rng.standard_normal((2 * n_embd, n_embd)).astype(np.float32) / 8)
            w.add_tensor("dense_3.weight", rng.standard_normal((n_embd, 2 * n_embd)).astype(np.float32) / 11)

    return tiny_model(path, arch, extra=extra, n_embd=n_embd, n_layer=2, vocab_from=vocab_from, seed=3)


def _copy_tokenizer(source: Path, w: GGUFWriter) -> int:
    """Every ``tokenizer.*`` key of ``source`` onto ``w``; the number of tokens."""
    fields = tokenizer_fields(source)
    for name, contents, kind, sub_type in fields:
        w.add_key_value(name, contents, kind, sub_type=sub_type)
    return next(len(contents) for name, contents, _, _ in fields if name == "tokenizer.ggml.tokens")


@functools.cache
def tokenizer_fields(source: Path) -> tuple[tuple[str, Any, Any, Any], ...]:
    """``source``'s ``tokenizer.*`` keys (name, contents, type, item type), read once by localllm's reader
    (gguf-py's parses a 49k-token vocabulary for seconds)."""
    from gguf import GGUFValueType

    header = read_gguf(source)
    return tuple((name, value, GGUFValueType(kind), None if item is None else GGUFValueType(item))
                 for name, value in header.metadata.items()
                 if name.startswith("tokenizer.") and name != "tokenizer.chat_template"
                 for kind, item in [header.value_types[name]])


def lora_adapter(path: Path, n_embd: int, layers: int, rank: int = 8, scale: float = 0.05) -> Path:
    """A LoRA adapter GGUF (as llama.cpp's convert_lora_to_gguf writes them) for the
    attention query and output projections of a llama model with ``n_embd`` and
    ``layers``; random weights large enough to change what the model says."""
    w = GGUFWriter(str(path), "llama")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))
    rng = np.random.default_rng(1)
    for layer in range(layers):
        for target in ("attn_q", "attn_output"):
            # ggml shapes: lora_a [n_in, rank], lora_b [rank, n_out]; numpy's are reversed
            w.add_tensor(f"blk.{layer}.{target}.weight.lora_a", rng.standard_normal((rank, n_embd)).astype(np.float32) * scale)
            w.add_tensor(f"blk.{layer}.{target}.weight.lora_b", rng.standard_normal((n_embd, rank)).astype(np.float32) * scale)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def fewer_layers(source: Path, path: Path, layers: int, context_length: int | None = None) -> Path:
    """``source`` with only its first ``layers`` blocks (its vocabulary, embeddings and output head
    unchanged): a smaller model that shares the source's vocabulary, as a draft model does.
    ``context_length`` other than None replaces the training context. The header is read by localllm's
    reader (gguf-py's parses a 49k-token vocabulary for seconds) and the tensors' bytes copied as they are."""
    from gguf import GGUFValueType

    header = read_gguf(source)
    arch = header.architecture
    w = GGUFWriter(str(path), arch)
    replaced = {f"{arch}.block_count": layers}
    if context_length is not None:
        replaced[f"{arch}.context_length"] = context_length
    for key, value in header.metadata.items():
        if key != "general.architecture":
            kind, item = header.value_types[key]
            w.add_key_value(key, replaced.get(key, value), GGUFValueType(kind),
                            sub_type=None if item is None else GGUFValueType(item))
    kept = [t for t in header.tensors if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < layers]
    for t in kept:  # numpy's shape (outermost first) in elements, the type as it is
        w.add_tensor_info(t.name, t.shape[::-1], np.dtype(np.float32), t.nbytes, GGMLQuantizationType(t.ggml_type))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    data = np.memmap(source, np.uint8, mode="r")
    for t in kept:
        w.write_tensor_data(data[t.offset:t.offset + t.nbytes])
    w.close()
    return path


Q4_K_M = 15  # llama_ftype: Q4_K for most matrices, Q6_K for some (and the output head)


def quantized(src: Path, dst: Path, ftype: int = Q4_K_M, threads: int = 2) -> Path:
    """``src`` quantized to ``ftype`` by llama.cpp's own quantizer (the mix it gives real models)."""
    import llama_cpp as ll

    from localllm.backends.llama_cpp import init_backend

    init_backend()  # llama.cpp's log through ours (quiet), not llama-cpp-python's printer
    params = ll.llama_model_quantize_default_params()
    params.ftype, params.nthread = ftype, threads
    if ll.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src}")
    return dst


# --- raw GGUF bytes, for files that break the header's rules --------------------

def gguf_string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def build_gguf(
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    kv: list[bytes] | None = None,
    kv_count: int | None = None,
    tensors: list[bytes] | None = None,
    tensor_count: int | None = None,
    data: bytes = b"\0" * 128,
) -> bytes:
    """A GGUF file from raw parts; the counts can lie."""
    kv = [kv_string("general.architecture", "llama")] if kv is None else kv
    tensors = [tensor_info("w", (32,), 0, 0)] if tensors is None else tensors
    header = magic + struct.pack("<IQQ", version, len(tensors) if tensor_count is None else tensor_count,
                                 len(kv) if kv_count is None else kv_count)  # fmt: skip
    body = header + b"".join(kv) + b"".join(tensors)
    body += b"\0" * (-len(body) % 32)
    return body + data


def kv_string(key: str, value: str) -> bytes:
    return gguf_string(key) + struct.pack("<I", 8) + gguf_string(value)


def kv_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", 4, value)


def kv_u8_array(key: str, count: int, fill: int = 0) -> bytes:
    """An array of ``count`` one-byte items: the cheapest way for a file to claim many items."""
    return gguf_string(key) + struct.pack("<IIQ", 9, 0, count) + bytes([fill]) * count


def tensor_info(name: str, shape: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return gguf_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape) + struct.pack(
        "<IQ", ggml_type, offset
    )


PROJECTOR_COLORS = ("red", "green", "blue", "white", "black")


def color_projector(path: Path, language_model: Path, image_size: int = 64, patch_size: int = 16) -> Path:
    """A LLaVA-style ("mlp") vision projector GGUF for ``language_model`` that libmtmd loads:
    a one-block CLIP ViT whose weights are zero (so each patch's features are its mean colour)
    and an MLP that scores the colour (red, green, blue, white, black) and writes the language
    model's own embedding of that word.  An image thus reads to the model as "red red red ..."
    (one word per patch, ``(image_size / patch_size)**2`` of them): deterministic weights, and
    different colours give different answers."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(language_model)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    vocab = {bytes(tokens.parts[i]).decode(): n for n, i in enumerate(tokens.data)}
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    table = dequantize(embd.data, embd.tensor_type)  # [n_vocab, n_embd]
    words = np.stack([table[vocab["\u0120" + colour]] for colour in PROJECTOR_COLORS])
    n_embd_out = table.shape[1]

    hidden, n_ff, n_patch_side = 8, 16, image_size // patch_size
    w = GGUFWriter(str(path), "clip")
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type("mlp")
    w.add_vision_image_size(image_size)
    w.add_vision_patch_size(patch_size)
    w.add_vision_embedding_length(hidden)
    w.add_vision_feed_forward_length(n_ff)
    w.add_vision_block_count(2)  # llava reads the second-to-last block's output: one block runs
    w.add_vision_head_count(1)
    w.add_vision_attention_layernorm_eps(1e-5)
    w.add_vision_projection_dim(n_embd_out)
    w.add_vision_image_mean([0.5, 0.5, 0.5])  # pixels reach the encoder in [-1, 1]
    w.add_vision_image_std([0.5, 0.5, 0.5])
    w.add_vision_use_gelu(True)
    w.add_file_type(F32)

    # patch embedding: a conv whose output channel c (< 3) is the patch's mean of colour c
    patch = np.zeros((hidden, 3, patch_size, patch_size), np.float32)
    for c in range(3):
        patch[c, c] = 1.0 / (patch_size * patch_size)
    w.add_tensor("v.patch_embd.weight", patch.astype(np.float16))
    w.add_tensor("v.position_embd.weight", np.zeros((n_patch_side * n_patch_side, hidden), np.float32))
    for il in range(2):
        blk = f"v.blk.{il}."
        for name, rows, cols in (("attn_q", hidden, hidden), ("attn_k", hidden, hidden), ("attn_v", hidden, hidden),
                                 ("attn_out", hidden, hidden), ("ffn_up", n_ff, hidden), ("ffn_down", hidden, n_ff)):
            w.add_tensor(f"{blk}{name}.weight", np.zeros((rows, cols), np.float32))
            w.add_tensor(f"{blk}{name}.bias", np.zeros(rows, np.float32))
        for norm in ("ln1", "ln2"):
            w.add_tensor(f"{blk}{norm}.weight", np.ones(hidden, np.float32))
            w.add_tensor(f"{blk}{norm}.bias", np.zeros(hidden, np.float32))
    # mm.0 scores each colour from (r, g, b) in [-1, 1]: positive only for that colour
    scores = np.zeros((len(PROJECTOR_COLORS), hidden), np.float32)
    scores[:, :3] = [[2, -1, -1], [-1, 2, -1], [-1, -1, 2], [1, 1, 1], [-1, -1, -1]]
    w.add_tensor("mm.0.weight", scores)
    w.add_tensor("mm.0.bias", np.full(len(PROJECTOR_COLORS), -2.0, np.float32))
    # mm.2 turns a score of about 2 (gelu(2) ~ 1.95) into twice that colour word's embedding: at
    # one times it, a Zen 3's rounding made SmolLM2 read blue as "whiskey"
    w.add_tensor("mm.2.weight", np.ascontiguousarray(words.T * 2 / 1.95).astype(np.float32))
    w.add_tensor("mm.2.bias", np.zeros(n_embd_out, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
