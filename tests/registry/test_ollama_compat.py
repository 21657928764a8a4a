"""Ollama-format GGUFs translated into llama.cpp's layout (registry/ollama_compat.py): each variant's keys and
tensors, byte for byte; the cache in the store (derived once, counted, removed with the blob, never half
written); files that cannot be translated named as such."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from support import arch_models

from localllm.gguf import read_gguf
from localllm.registry import ollama_compat
from localllm.registry.models import import_gguf, load_local_model, register_model, translate_model
from localllm.registry.names import ModelName
from localllm.registry.ollama_compat import IncompatibleModel, plan, translate, variant_of
from localllm.registry.store import Store


def tensors_of(path: Path) -> dict[str, tuple[tuple[int, ...], int, bytes]]:
    """Every tensor's shape, type and bytes."""
    header = read_gguf(path, skip_arrays_over=0)
    with open(path, "rb") as f:
        return {t.name: (t.shape, t.ggml_type, os.pread(f.fileno(), t.nbytes, t.offset)) for t in header.tensors}


def fields_of(path: Path) -> dict:
    """Every metadata key's value."""
    return read_gguf(path).metadata


def stored(store: Store, path: Path) -> str:
    digest, _ = import_gguf(store, path)
    return digest


def test_gpt_oss_in_ollama_layout_becomes_the_upstream_file(tmp_path, smollm2_path):
    upstream = arch_models.gpt_oss(tmp_path / "up.gguf", smollm2_path, "upstream")
    theirs = arch_models.gpt_oss(tmp_path / "ollama.gguf", smollm2_path, "ollama")
    assert variant_of(read_gguf(theirs, skip_arrays_over=16)) == "gptoss"
    assert variant_of(read_gguf(upstream, skip_arrays_over=16)) is None
    store = Store(tmp_path / "models")
    digest = stored(store, theirs)
    files = translate(store, digest)
    assert files.projector is None and files.model.parent.parent == store.translated_dir(digest)
    assert tensors_of(files.model) == tensors_of(upstream)  # names, shapes, types and bytes (Q8_0 experts too)
    translated, expected = fields_of(files.model), fields_of(upstream)
    assert translated == expected  # every key and value
    assert read_gguf(files.model).value_types == read_gguf(upstream).value_types  # and type
    assert store.blob_path(digest).read_bytes() == theirs.read_bytes()
    assert store.derived_bytes([digest]) == files.model.stat().st_size


def test_a_translation_is_made_once_and_goes_with_its_blob(tmp_path, smollm2_path):
    store = Store(tmp_path / "models")
    name = ModelName.parse("oss")
    digest = stored(store, arch_models.gpt_oss(tmp_path / "o.gguf", smollm2_path, "ollama"))
    register_model(store, name, digest)
    model = load_local_model(store, name)
    assert model.ollama_format == "gptoss" and model.translated is None and model.run_path == model.model_path
    translate_model(store, model)
    made = model.run_path
    assert made != model.model_path and read_gguf(made, skip_arrays_over=0).architecture == "gpt-oss"
    again = load_local_model(store, name)
    assert again.run_path == made  # found in the cache, not made again
    mtime = made.stat().st_mtime_ns
    translate(store, digest)
    assert made.stat().st_mtime_ns == mtime
    entry = next(e for e in store.list_models() if e.name == name)
    assert entry.size == model.size + made.stat().st_size
    store.delete(name)
    assert not store.translated_dir(digest).exists()


def test_leftovers_of_a_killed_translation_are_removed_at_start(tmp_path, smollm2_path):
    store = Store(tmp_path / "models")
    digest = stored(store, arch_models.gpt_oss(tmp_path / "o.gguf", smollm2_path, "ollama"))
    half = store.temp_path("translated")
    half.mkdir()
    (half / "model.gguf").write_bytes(b"GGUF half")
    orphan = store.translated_dir("sha256:" + "0" * 64)
    orphan.mkdir(parents=True)
    translate(store, digest)
    store.remove_temporaries()
    assert not half.exists() and not orphan.exists() and store.translated_dir(digest).is_dir()


def test_a_header_with_more_array_items_than_a_translation_reads_is_named_so(tmp_path, smollm2_path, monkeypatch):
    store = Store(tmp_path / "models")
    digest = stored(store, arch_models.gpt_oss(tmp_path / "b.gguf", smollm2_path, "ollama"))
    monkeypatch.setattr(ollama_compat, "TRANSLATED_ARRAY_ITEMS", 1000)  # SmolLM2's vocabulary: 49,152 tokens
    with pytest.raises(IncompatibleModel, match=r"gptoss model's metadata arrays hold more than 1000 items"):
        translate(store, digest)
    assert not store.translated_dir(digest).exists() and not list(store.partial_dir.iterdir())


def test_an_inconsistent_file_leaves_nothing_behind(tmp_path, smollm2_path):
    store = Store(tmp_path / "models")
    digest = stored(store, arch_models.gpt_oss(tmp_path / "b.gguf", smollm2_path, "ollama",
                                               drop=("blk.0.ffn_gate_exps.weight",)))
    with pytest.raises(IncompatibleModel, match=r"'gptoss'.*'blk.0.ffn_gate_exps.weight'.*expert_feed_forward_length"):
        translate(store, digest)
    assert not store.translated_dir(digest).exists() and not list(store.partial_dir.iterdir())


def test_the_embedded_encoder_is_split_out_with_the_projectors_keys(tmp_path, smollm2_path, projector_path):
    one = arch_models.embedded_projector(tmp_path / "one.gguf", smollm2_path, projector_path)
    store = Store(tmp_path / "models")
    files = translate(store, stored(store, one))
    assert tensors_of(files.model) == tensors_of(smollm2_path)
    assert tensors_of(files.projector) == tensors_of(projector_path)
    lm_keys = fields_of(files.model)
    assert not [k for k in lm_keys if ".vision." in k]
    clip = fields_of(files.projector)
    expected = fields_of(projector_path)
    for key in ("clip.projector_type", "clip.has_vision_encoder", "clip.use_gelu", "clip.vision.image_mean",
                "clip.vision.projection_dim", "clip.vision.block_count", "clip.vision.image_size"):
        assert clip[key] == expected[key], key
    assert clip["general.architecture"] == "clip"


# --- the other variants, from small files written in Ollama's layout ---------------------------------------

def ollama_file(path: Path, arch: str, keys: dict, tensors: dict[str, np.ndarray]) -> Path:
    w = GGUFWriter(str(path), arch)
    for key, value in keys.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape[::-1]).astype(np.float32)


def translated(tmp_path: Path, path: Path):
    store = Store(tmp_path / "models")
    return translate(store, stored(store, path))


def test_glm_ocr_gate_and_up_are_fused_and_keys_renamed(tmp_path):
    gate, up = rand(16, 8, seed=1), rand(16, 8, seed=2)
    src = ollama_file(tmp_path / "g.gguf", "glmocr", {
        "glmocr.block_count": 1, "glmocr.attention.key_length": 4, "glmocr.rope.mrope_section": [1, 2, 3],
        "tokenizer.ggml.pre": "llama-bpe"}, {
        "token_embd.weight": rand(16, 4), "blk.0.ffn_gate.weight": gate, "blk.0.ffn_up.weight": up,
        "blk.0.attn_out.weight": rand(16, 16), "blk.0.post_attn_norm.weight": rand(16), "blk.0.post_ffn_norm.weight":
        rand(16)})
    files = translated(tmp_path, src)
    keys, tensors = fields_of(files.model), tensors_of(files.model)
    assert keys["general.architecture"] == "glm4" and keys["glm4.rope.dimension_sections"] == [1, 2, 3, 0]
    assert keys["glm4.rope.dimension_count"] == 4 and keys["tokenizer.ggml.pre"] == "chatglm-bpe"
    assert sorted(tensors) == ["blk.0.attn_output.weight", "blk.0.ffn_up.weight", "blk.0.post_attention_norm.weight",
                               "blk.0.post_ffw_norm.weight", "token_embd.weight"]
    shape, _type, data = tensors["blk.0.ffn_up.weight"]
    assert shape == (16, 16) and data == gate.tobytes() + up.tobytes()  # gate first: silu(gate) * up


def test_lfm2_qwen3next_and_qwen35_renames(tmp_path):
    lfm2 = translated(tmp_path / "a", ollama_file(tmp_path / "l.gguf", "lfm2", {"lfm2.feed_forward_length": 99}, {
        "output_norm.weight": rand(8), "blk.0.ffn_gate.weight": rand(8, 24)}))
    assert "token_embd_norm.weight" in tensors_of(lfm2.model)
    assert fields_of(lfm2.model)["lfm2.feed_forward_length"] == 24
    nxt = translated(tmp_path / "b", ollama_file(tmp_path / "n.gguf", "qwen3next", {
        "qwen3next.attention.head_count_kv": [0, 0, 2, 0]}, {"blk.0.ssm_dt": rand(8)}))
    assert "blk.0.ssm_dt.bias" in tensors_of(nxt.model)
    assert fields_of(nxt.model)["qwen3next.attention.head_count_kv"] == 2
    q35 = translated(tmp_path / "c", ollama_file(tmp_path / "q.gguf", "qwen35", {
        "qwen35.rope.dimension_sections": [11, 11, 10], "qwen35.attention.head_count_kv": [0, 4]}, {
        "blk.0.ssm_dt": rand(8), "mtp.0.w.weight": rand(8), "v.blk.0.attn_q.weight": rand(8, 8)}))
    assert sorted(tensors_of(q35.model)) == ["blk.0.ssm_dt.bias"]
    assert list(tensors_of(q35.projector)) == ["v.blk.0.attn_q.weight"]
    assert fields_of(q35.model)["qwen35.rope.dimension_sections"] == [11, 11, 10, 0]


def test_gemma3_text_and_vision_split(tmp_path):
    patch = rand(14, 14, 3, 8).astype(np.float16)
    src = ollama_file(tmp_path / "g3.gguf", "gemma3", {
        "gemma3.embedding_length": 16, "gemma3.context_length": 131072, "gemma3.vision.block_count": 1,
        "gemma3.vision.embedding_length": 8, "gemma3.vision.image_size": 28, "gemma3.vision.patch_size": 14,
        "gemma3.rope.global.freq_base": 5e5, "tokenizer.ggml.tokens": ["a", "b", "c", "<image_soft_token>"]}, {
        "token_embd.weight": rand(16, 3), "v.patch_embedding.weight": patch, "v.blk.0.layer_norm1.weight": rand(8),
        "v.blk.0.mlp.fc1.weight": rand(8, 8), "mm.mm_input_projection.weight": rand(8, 16)})
    files = translated(tmp_path, src)
    keys = fields_of(files.model)
    assert keys["gemma3.rope.freq_base"] == 5e5
    assert keys["gemma3.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert keys["gemma3.rope.scaling.type"] == "linear" and keys["tokenizer.ggml.tokens"] == ["a", "b", "c"]
    assert sorted(tensors_of(files.model)) == ["token_embd.weight"]
    clip, tensors = fields_of(files.projector), tensors_of(files.projector)
    assert clip["clip.projector_type"] == "gemma3" and clip["clip.vision.projection_dim"] == 16
    assert clip["clip.vision.image_size"] == 28 and clip["clip.has_vision_encoder"] is True
    assert sorted(tensors) == ["mm.input_projection.weight", "v.blk.0.ffn_down.weight", "v.blk.0.ln1.weight",
                               "v.patch_embd.weight"]
    assert tensors["v.patch_embd.weight"][1] == 0  # promoted to F32
    assert tensors["v.patch_embd.weight"][2] == patch.astype(np.float32).tobytes()


def test_arch_renames_olmo3_glm4moelite_qwen25vl(tmp_path):
    olmo = translated(tmp_path / "a", ollama_file(tmp_path / "o.gguf", "olmo3", {"olmo3.block_count": 2}, {
        "token_embd.weight": rand(8, 4)}))
    assert fields_of(olmo.model)["olmo2.block_count"] == 2
    glm = translated(tmp_path / "b", ollama_file(tmp_path / "g.gguf", "glm4moelite", {
        "glm4moelite.attention.key_length": 256, "glm4moelite.attention.kv_lora_rank": 512,
        "glm4moelite.rope.dimension_count": 64, "glm4moelite.attention.head_count_kv": 20}, {"x.weight": rand(8)}))
    keys = fields_of(glm.model)
    assert [keys[k] for k in ("general.architecture", "deepseek2.attention.key_length",
                              "deepseek2.attention.value_length", "deepseek2.attention.key_length_mla",
                              "deepseek2.attention.head_count_kv")] == ["deepseek2", 576, 512, 256, 1]
    broken = ollama_file(tmp_path / "g2.gguf", "glm4moelite", {}, {"x.weight": rand(8)})
    with pytest.raises(IncompatibleModel, match="'glm4moelite'.*kv_lora_rank"):
        plan(read_gguf(broken))
    vl = translated(tmp_path / "c", ollama_file(tmp_path / "v.gguf", "qwen25vl", {
        "qwen25vl.rope.mrope_section": [16, 24, 24]}, {"token_embd.weight": rand(8, 4), "v.blk.0.x.weight": rand(8)}))
    assert fields_of(vl.model)["qwen2vl.rope.dimension_sections"] == [16, 24, 24, 0]
    assert "qwen2vl.rope.mrope_section" not in fields_of(vl.model)
    assert list(tensors_of(vl.model)) == ["token_embd.weight"] and list(tensors_of(vl.projector)) == ["v.blk.0.x.weight"]


def test_gemma3_in_one_file_becomes_the_upstream_model_and_mmproj(tmp_path):
    model, projector = arch_models.gemma3_vision(tmp_path / "up", "upstream")
    one, _ = arch_models.gemma3_vision(tmp_path / "ol", "ollama")
    files = translated(tmp_path, one)
    assert tensors_of(files.model) == tensors_of(model) and fields_of(files.model) == fields_of(model)
    assert tensors_of(files.projector) == tensors_of(projector)  # renamed, the patch embedding back in F32
    assert fields_of(files.projector) == fields_of(projector)


def test_mistral3_pixtral_encoder_is_split_out_with_rope_ordered_q_and_k(tmp_path):
    n_head, hidden = 2, 8
    q = rand(hidden, hidden, seed=3).astype(np.float16)
    src = ollama_file(tmp_path / "m.gguf", "mistral3", {
        "mistral3.embedding_length": 16, "mistral3.rope.scaling.beta_fast": 32.0, "mistral3.spatial_merge_size": 2,
        "mistral3.vision.attention.head_count": n_head, "mistral3.vision.block_count": 1,
        "mistral3.vision.embedding_length": hidden}, {
        "token_embd.weight": rand(16, 4), "v.patch_conv.weight": rand(2, 2, 3, hidden).astype(np.float16),
        "v.encoder_norm.weight": rand(hidden), "v.blk.0.attn_q.weight": q, "v.blk.0.attn_norm.weight": rand(hidden),
        "mm.linear_1.weight": rand(hidden, 16), "mm.patch_merger.merging_layer.weight": rand(4 * hidden, hidden)})
    files = translated(tmp_path, src)
    keys = fields_of(files.model)
    assert keys["mistral3.rope.scaling.yarn_beta_fast"] == 32.0 and not [k for k in keys if ".vision." in k]
    clip, tensors = fields_of(files.projector), tensors_of(files.projector)
    assert (clip["clip.projector_type"], clip["clip.vision.spatial_merge_size"], clip["clip.use_silu"]) == (
        "pixtral", 2, True)
    assert sorted(tensors) == ["mm.1.weight", "mm.patch_merger.weight", "v.blk.0.attn_q.weight", "v.blk.0.ln1.weight",
                               "v.patch_embd.weight", "v.pre_ln.weight", "v.token_embd.img_break"]
    assert tensors["v.token_embd.img_break"] == ((16,), 0, bytes(64))
    # llama.cpp's converter's permute of Hugging Face's Q rows, as a reference
    expected = q.reshape(n_head, 2, hidden // n_head // 2, hidden).swapaxes(1, 2).reshape(hidden, hidden)
    assert tensors["v.blk.0.attn_q.weight"][2] == expected.tobytes()
    assert tensors["v.patch_embd.weight"][1] == 0


def test_llama_cpp_refusals_name_the_architecture_and_what_is_missing(tmp_path, smollm2_path):
    from localllm.backends.contract import BackendError
    from localllm.backends.llama_cpp import Model, init_backend

    init_backend()
    theirs = arch_models.gpt_oss(tmp_path / "o.gguf", smollm2_path, "ollama", drop=("blk.1.attn_sinks",))
    with pytest.raises(BackendError, match="architecture 'gptoss': .* does not know this architecture"):
        Model(theirs)  # untranslated
    with pytest.raises(BackendError, match="architecture 'gpt-oss': the file lacks the tensor "
                                           "'blk.1.attn_sinks.weight' that this architecture needs"):
        Model(translated(tmp_path, theirs).model)


def test_two_first_loads_at_once_share_one_translation(tmp_path, smollm2_path):
    from concurrent.futures import ThreadPoolExecutor

    store = Store(tmp_path / "models")
    digest = stored(store, arch_models.gpt_oss(tmp_path / "o.gguf", smollm2_path, "ollama"))
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: translate(store, digest), range(2))
    assert first == second and [p.name for p in store.translated_dir(digest).rglob("*.gguf")] == ["model.gguf"]
    assert not list(store.partial_dir.iterdir())


def test_gemma4_experts_gate_and_up_are_interleaved_per_expert(tmp_path):
    gate, up = rand(8, 4, 3, seed=1), rand(8, 4, 3, seed=2)  # [n_embd, n_ff, n_expert]
    audio = {f"a.blk.0.{leaf}.weight": rand(8, seed=i) for i, leaf in enumerate(
        ("ln1", "ln2", "layer_pre_norm", "linear_pos"))} | {"a.pre_encode.out.weight": rand(8), "mm.a.fc.weight": rand(8)}
    src = ollama_file(tmp_path / "g4.gguf", "gemma4", {
        "gemma4.block_count": 1, "gemma4.embedding_length": 8, "tokenizer.ggml.model": "llama",
        "gemma4.audio.block_count": 1, "gemma4.audio.embedding_length": 8}, {
        "blk.0.ffn_gate_exps.weight": gate, "blk.0.ffn_up_exps.weight": up,
        "blk.0.ffn_gate_inp.per_expert_scale": rand(3), "v.blk.0.w.weight": rand(8), **audio})
    files = translated(tmp_path, src)
    assert fields_of(files.model)["tokenizer.ggml.model"] == "gemma4"
    clip, encoders = fields_of(files.projector), tensors_of(files.projector)  # vision and audio: Ollama's renames
    assert sorted(encoders) == ["a.blk.0.attn_k_rel.weight", "a.blk.0.attn_post_norm.weight",
                                "a.blk.0.attn_pre_norm.weight", "a.blk.0.ln2.weight", "a.input_projection.weight",
                                "a.pre_encode.out.weight", "v.blk.0.w.weight"]
    assert encoders["a.blk.0.ln2.weight"][2] == audio["a.blk.0.layer_pre_norm.weight"].tobytes()
    assert (clip["clip.audio.projector_type"], clip["clip.vision.projector_type"], clip["clip.audio.num_mel_bins"],
            clip["clip.audio.projection_dim"], clip["clip.has_audio_encoder"]) == ("gemma4a", "gemma4v", 128, 8, True)
    assert "clip.projector_type" not in clip and not [k for k in fields_of(files.model) if ".audio." in k]
    tensors = tensors_of(files.model)
    assert sorted(tensors) == ["blk.0.ffn_down_exps.scale", "blk.0.ffn_gate_up_exps.weight"]
    shape, _type, data = tensors["blk.0.ffn_gate_up_exps.weight"]
    assert shape == (8, 8, 3) and data == np.concatenate([gate, up], axis=1).tobytes()  # numpy: [expert, ff, embd]


def test_a_text_only_ollama_qwen35moe_is_told_by_its_feed_forward_length(tmp_path):
    """Ollama's qwen35moe files state ``feed_forward_length``, llama.cpp's do not: a file without a vision tower
    or MTP layers is still Ollama's, its ``ssm_dt`` renamed."""
    src = ollama_file(tmp_path / "q.gguf", "qwen35moe", {
        "qwen35moe.feed_forward_length": 512, "qwen35moe.attention.head_count_kv": [0, 0, 0, 2]}, {
        "blk.0.ssm_dt": rand(8)})
    assert variant_of(read_gguf(src)) == "qwen35moe"
    files = translated(tmp_path, src)
    assert list(tensors_of(files.model)) == ["blk.0.ssm_dt.bias"]
    assert fields_of(files.model)["qwen35moe.attention.head_count_kv"] == 2


@pytest.mark.parametrize("family", ["qwen25vl", "qwen3vl", "qwen35", "glmocr", "gemma4", "llama4"])
def test_an_embedded_encoder_becomes_the_upstream_mmproj_and_sees_images_alike(tmp_path, family):
    """Ollama's one file of each family: the translated model and projector are the upstream pair's files, and
    libmtmd gives the same logits after an image through either pair (and other logits for another image)."""
    model, mmproj, one = arch_models.vision_family(tmp_path, family)
    files = translated(tmp_path, one)
    assert tensors_of(files.model) == tensors_of(model) and fields_of(files.model) == fields_of(model)
    assert tensors_of(files.projector) == tensors_of(mmproj) and fields_of(files.projector) == fields_of(mmproj)
    side = 32
    image = (np.arange(side * side * 3) % 251).astype(np.uint8).tobytes()
    ours = arch_models.libmtmd_logits(files.model, files.projector, "look <__media__> here", image, side, side)
    assert np.array_equal(ours, arch_models.libmtmd_logits(model, mmproj, "look <__media__> here", image, side, side))
    other = bytes(255 - b for b in image)
    assert not np.allclose(ours, arch_models.libmtmd_logits(files.model, files.projector, "look <__media__> here", other, side, side))


def test_gemma4s_audio_encoder_inside_becomes_the_upstream_mmproj_and_hears_alike(tmp_path):
    """Ollama's gemma4 file with the conformer audio encoder beside the vision encoder: the translated projector
    is the upstream mmproj holding both (Ollama's audio leaf names renamed, the audio keys as ``clip.audio.*``),
    and libmtmd's logits after an audio clip are the same through either pair, and others for another clip."""
    from support.audio import chirp, tone, wav

    model, mmproj, one = arch_models.gemma4_hearing(tmp_path)
    files = translated(tmp_path, one)
    assert tensors_of(files.model) == tensors_of(model) and fields_of(files.model) == fields_of(model)
    assert tensors_of(files.projector) == tensors_of(mmproj) and fields_of(files.projector) == fields_of(mmproj)
    low, sweep = wav(tone(300, 0.6)), wav(chirp(200, 4000, 0.6))
    ours = arch_models.libmtmd_logits(files.model, files.projector, "<__media__>listen", media_file=low)
    assert np.array_equal(ours, arch_models.libmtmd_logits(model, mmproj, "<__media__>listen", media_file=low))
    assert not np.allclose(ours, arch_models.libmtmd_logits(files.model, files.projector, "<__media__>listen",
                                                             media_file=sweep))


def test_gemma4s_packed_vision_clamps_become_llama_cpps_scalars(tmp_path):
    """Ollama's ``v.clamp_data`` (four bounds a linear, each vision block's seven linears then the projection's)
    becomes the ``<linear>.input_min`` ... scalars gemma4v reads; a row Ollama zero-filled (no clamp) bounds
    nothing; a table of another size is an error naming it."""
    table = np.arange(1, 33, dtype=np.float32)
    table[4:8] = 0  # attn_k: Ollama had no clamp for it
    keys = {"gemma4.block_count": 1, "gemma4.embedding_length": 8, "gemma4.vision.block_count": 1}
    src = ollama_file(tmp_path / "g4.gguf", "gemma4", keys, {"v.blk.0.w.weight": rand(8), "v.clamp_data": table})
    scalars = {name: np.frombuffer(data, np.float32)[0] for name, (_s, _t, data) in
               tensors_of(translated(tmp_path, src).projector).items() if name != "v.blk.0.w.weight"}
    assert len(scalars) == 32 and "v.clamp_data" not in scalars
    assert [scalars[f"v.blk.0.attn_q.{b}"] for b in ollama_compat.CLAMP_BOUNDS] == [1, 2, 3, 4]
    assert [scalars[f"mm.input_projection.{b}"] for b in ollama_compat.CLAMP_BOUNDS] == [29, 30, 31, 32]
    assert [scalars[f"v.blk.0.attn_k.{b}"] for b in ollama_compat.CLAMP_BOUNDS] == [
        -ollama_compat.FLT_MAX, ollama_compat.FLT_MAX, -ollama_compat.FLT_MAX, ollama_compat.FLT_MAX]
    short = ollama_file(tmp_path / "short.gguf", "gemma4", keys, {"v.blk.0.w.weight": rand(8),
                                                                  "v.clamp_data": table[:28]})
    with pytest.raises(IncompatibleModel, match="v.clamp_data has shape \\[28\\]"):
        translated(tmp_path / "other", short)
