"""The bounded GGUF reader on the real models and on crafted hostile files."""

from __future__ import annotations

import random
import struct
import tracemalloc
from pathlib import Path

import gguf as gguf_py
import pytest

from localllm.gguf import DEFAULT_KEPT_ITEMS, FILE_TYPES, GGML_TYPES, InvalidGGUF, SkippedArray, read_gguf
from support.gguf_builders import build_gguf, gguf_string, kv_string, kv_u8_array, kv_u32, tensor_info


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    return path


def test_smollm2_header(smollm2_path: Path) -> None:
    model = read_gguf(smollm2_path)
    assert model.version == 3
    assert model.architecture == "llama"
    assert model.quantization == "Q4_1"
    assert model.parameter_count == 134_515_008
    assert len(model.tensors) == 272
    assert len(model.metadata["tokenizer.ggml.tokens"]) == 49152
    assert model.metadata["tokenizer.chat_template"].startswith("{% for message in messages %}")
    assert {t.type_name for t in model.tensors} >= {"Q4_1", "F32"}


def test_gemma3_header_with_skipped_arrays(gemma3_path: Path) -> None:
    model = read_gguf(gemma3_path, skip_arrays_over=1024)
    assert model.architecture == "gemma3"
    assert model.quantization == "Q4_K_M"
    assert model.arch_value("context_length") == 32768
    assert model.metadata["tokenizer.ggml.tokens"] == SkippedArray("string", 262144)
    assert model.metadata["tokenizer.ggml.scores"] == SkippedArray("float32", 262144)
    assert {"Q4_K", "Q6_K"} <= {t.type_name for t in model.tensors}


def test_tensor_table_agrees_with_gguf_py(smollm2_path: Path) -> None:
    ours = {t.name: (t.offset, t.nbytes, t.shape) for t in read_gguf(smollm2_path, skip_arrays_over=0).tensors}
    theirs = gguf_py.GGUFReader(smollm2_path).tensors
    assert len(ours) == len(theirs)
    for tensor in theirs:
        assert ours[tensor.name] == (tensor.data_offset, tensor.n_bytes, tuple(int(d) for d in tensor.shape))


def test_type_tables_agree_with_gguf_py() -> None:
    for type_id, (name, block, size) in GGML_TYPES.items():
        quant = gguf_py.GGMLQuantizationType(type_id)
        assert quant.name == name
        assert gguf_py.GGML_QUANT_SIZES[quant] == (block, size)
    for file_type, name in FILE_TYPES.items():
        assert gguf_py.LlamaFileType(file_type).name in (f"MOSTLY_{name}", f"ALL_{name}")


def test_minimal_crafted_file_is_valid(tmp_path: Path) -> None:
    model = read_gguf(write(tmp_path, build_gguf()))
    assert model.architecture == "llama"
    assert model.tensors[0].nbytes == 128  # 32 x F32


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "too short"),
        (b"GGML" + b"\0" * 60, "not a GGUF file"),
        (build_gguf(magic=b"\x7fELF"), "not a GGUF file"),
        (build_gguf(version=1), "unsupported GGUF version 1"),
        (build_gguf(version=99), "unsupported GGUF version 99"),
        (build_gguf(version=3 << 24), "big-endian"),
        (build_gguf(tensor_count=2**63), "tensors, limit"),
        (build_gguf(kv_count=2**40), "metadata entries, limit"),
        (build_gguf(kv_count=5), "truncated|appears twice"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<IQ", 8, 2**62)]), "limit"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<IQ", 8, 10_000)]), "truncated"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<IIQ", 9, 6, 2**40)]), "items, limit"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<IIQ", 9, 6, 1_000_000)]), "truncated"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<IIQ", 9, 8, 1_000_000)]), "truncated"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<IIQ", 9, 9, 1)]), "unsupported type"),
        (build_gguf(kv=[gguf_string("k") + struct.pack("<I", 77)]), "unknown value type 77"),
        (build_gguf(kv=[kv_u32("a", 1), kv_u32("a", 2)]), "appears twice"),
        (build_gguf(kv=[kv_u32("general.alignment", 3)]), "power of two"),
        (build_gguf(tensors=[tensor_info("w", (32,), 0, 1 << 40)]), "beyond the end of the file"),
        (build_gguf(tensors=[tensor_info("w", (32,), 0, 0)], data=b"\0" * 100), "beyond the end of the file"),
        (build_gguf(tensors=[tensor_info("w", (32,), 0, 8)], data=b"\0" * 256), "not aligned"),
        (build_gguf(tensors=[tensor_info("w", (1, 1, 1, 1, 1), 0, 0)]), "5 dimensions"),
        (build_gguf(tensors=[tensor_info("w", (2**40, 2**40), 0, 0)]), "impossible shape"),
        (build_gguf(tensors=[tensor_info("w", (32,), 5, 0)]), "unknown ggml type 5"),
        (build_gguf(tensors=[tensor_info("w", (33,), 2, 0)]), "not a multiple"),
        (build_gguf(tensors=[tensor_info("x" * 64, (32,), 0, 0)]), "limit is 63"),
        (build_gguf(tensors=[tensor_info("w", (32,), 0, 0), tensor_info("w", (32,), 0, 128)], data=b"\0" * 256),
         "appears twice"),
        (build_gguf(tensors=[tensor_info("a", (32,), 0, 0), tensor_info("b", (32,), 0, 64)], data=b"\0" * 256),
         "overlap"),
    ],
)  # fmt: skip
def test_hostile_files_are_rejected_with_a_reason(tmp_path: Path, data: bytes, problem: str) -> None:
    with pytest.raises(InvalidGGUF, match=problem if problem.isascii() else None):
        read_gguf(write(tmp_path, data))


def test_metadata_limit_applies(tmp_path: Path) -> None:
    big = build_gguf(kv=[kv_string("general.architecture", "llama"), kv_string("blob", "x" * 100_000)])
    path = write(tmp_path, big)
    with pytest.raises(InvalidGGUF, match="larger than the 4096-byte limit"):
        read_gguf(path, max_metadata_bytes=4096)
    assert read_gguf(path).metadata["blob"] == "x" * 100_000


def test_every_truncation_of_a_real_header_is_rejected(tmp_path: Path, smollm2_path: Path) -> None:
    """Cut the SmolLM2 file at many points (inside the header and inside the tensor data)."""
    with smollm2_path.open("rb") as f:
        head = f.read(1_785_664 + 4096)
    rng = random.Random(7)
    cuts = sorted({0, 3, 4, 8, 23, 24, 25, 100, 1_785_600, *(rng.randrange(24, len(head)) for _ in range(40))})
    for cut in cuts:
        path = write(tmp_path, head[:cut])
        with pytest.raises(InvalidGGUF):
            read_gguf(path)


def test_random_corruption_never_escapes_as_another_error(tmp_path: Path) -> None:
    good = build_gguf(
        kv=[kv_string("general.architecture", "llama"), kv_u32("llama.context_length", 4096),
            gguf_string("tokens") + struct.pack("<IIQ", 9, 8, 2) + gguf_string("a") + gguf_string("bb")],
        tensors=[tensor_info("w", (32, 2), 0, 0), tensor_info("q", (64,), 8, 256)],
        data=b"\1" * 512,
    )  # fmt: skip
    assert read_gguf(write(tmp_path, good)).metadata["tokens"] == ["a", "bb"]
    rng = random.Random(1234)
    for _ in range(600):
        mutated = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(mutated) - 512)  # corrupt the header, not the tensor data
            mutated[position] = rng.randrange(256)
        path = write(tmp_path, bytes(mutated))
        try:
            read_gguf(path)
        except InvalidGGUF:
            pass


def test_missing_file_is_invalid_gguf(tmp_path: Path) -> None:
    with pytest.raises(InvalidGGUF, match="cannot open"):
        read_gguf(tmp_path / "absent.gguf")


def test_a_16m_item_array_is_never_a_python_list(tmp_path: Path) -> None:
    """16 M one-byte items in a 16 MB header would be a 128 MB list (and more as JSON): past the read's item
    budget an array is only its type and length."""
    path = write(tmp_path, build_gguf(kv=[kv_string("general.architecture", "llama"),
                                          kv_u8_array("hostile.items", 1 << 24)]))
    tracemalloc.start()
    try:
        model = read_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert model.metadata["hostile.items"] == SkippedArray("uint8", 1 << 24)
    assert peak < 4 << 20, f"reading the header took {peak} bytes"


def test_arrays_are_kept_in_file_order_while_the_budget_lasts(tmp_path: Path) -> None:
    path = write(tmp_path, build_gguf(kv=[kv_string("general.architecture", "llama"), kv_u8_array("a", 600, 1),
                                          kv_u8_array("b", 600, 2), kv_u8_array("c", 300, 3)]))
    metadata = read_gguf(path, keep_items=1000).metadata
    assert metadata["a"] == [1] * 600
    assert metadata["b"] == SkippedArray("uint8", 600)  # 1,200 would pass the budget
    assert metadata["c"] == [3] * 300  # what is left still holds it
    assert DEFAULT_KEPT_ITEMS >= 4 * 262_144  # a 262k vocabulary's tokens, scores and types fit by default
