"""A bounded reader of GGUF headers: metadata and tensor table, never tensor data.

Pulled files come from the network, so this reader treats every count, length
and offset as hostile: each read is checked against the file size and against
explicit limits before anything is allocated, and a file whose tensors do not
fit inside it is rejected. Metadata arrays become Python lists only up to a
number of items in all (a list costs 8 bytes and more an item, so a 256 MiB
header of one-byte items would otherwise be gigabytes); the arrays past it are
returned as their type and length only. Errors are InvalidGGUF with a message naming the
offending field, never a struct/Index/Memory error, and never quoting bytes of
a file that does not even start like a GGUF file.
"""

from __future__ import annotations

import array
import mmap
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_TENSOR_NAME = 63  # ggml's GGML_MAX_NAME (64) including the terminating NUL
MAX_DIMS = 4
#: A repeating layer's expert tensors (``blk.N.ffn_up_exps.weight``, ...), as llama.cpp's ``--n-cpu-moe`` matches
#: them (common.h ``LLM_FFN_EXPS_REGEX``): shared experts (``ffn_*_shexp``) and the router are not among them.
EXPERT_TENSORS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
_U64 = struct.Struct("<Q")

# GGUF metadata value types: id -> (name, struct format or None for string/array)
_STRING, _ARRAY = 8, 9
_VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("uint8", "B"),
    1: ("int8", "b"),
    2: ("uint16", "H"),
    3: ("int16", "h"),
    4: ("uint32", "I"),
    5: ("int32", "i"),
    6: ("float32", "f"),
    7: ("bool", "?"),
    8: ("string", None),
    9: ("array", None),
    10: ("uint64", "Q"),
    11: ("int64", "q"),
    12: ("float64", "d"),
}

# ggml tensor types: id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

# llama.cpp's llama_ftype (general.file_type) -> the quantization name Ollama shows
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE",
}  # fmt: skip


class InvalidGGUF(ValueError):
    """A file that is not a GGUF model we can trust."""


DEFAULT_KEPT_ITEMS = 1 << 20  # array items one read decodes into lists, in all (a vocabulary: 32k to 262k items)


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array left unread (``skip_arrays_over``, ``keep_items``); only its type and length are known."""

    item_type: str
    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute position of the data in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass
class GGUFFile:
    """What :func:`read_gguf` learned from a file's header."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    alignment: int
    data_offset: int
    file_size: int
    # key -> (GGUF value type, item type of an array or None): what a writer needs to keep each value's type
    value_types: dict[str, tuple[int, int | None]] = field(default_factory=dict, repr=False)
    _by_name: dict[str, TensorInfo] = field(default_factory=dict, repr=False)

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def file_type(self) -> int | None:
        value = self.metadata.get("general.file_type")
        return value if isinstance(value, int) else None

    @property
    def quantization(self) -> str:
        """Ollama's ``quantization_level``: the file type, else the most common weight type."""
        if self.file_type in FILE_TYPES:
            return FILE_TYPES[self.file_type]
        weights = [t for t in self.tensors if len(t.shape) >= 2] or self.tensors
        if not weights:
            return "unknown"
        counts: dict[str, int] = {}
        for tensor in weights:
            counts[tensor.type_name] = counts.get(tensor.type_name, 0) + tensor.n_elements
        return max(counts, key=counts.__getitem__)

    @property
    def parameter_count(self) -> int:
        value = self.metadata.get("general.parameter_count")
        if isinstance(value, int) and value > 0:
            return value
        return sum(t.n_elements for t in self.tensors)

    def arch_value(self, key: str, default: Any = None) -> Any:
        """``<architecture>.<key>``, e.g. ``arch_value("context_length")``."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def tensor(self, name: str) -> TensorInfo | None:
        if not self._by_name:
            self._by_name = {t.name: t for t in self.tensors}
        return self._by_name.get(name)


class _Cursor:
    """Sequential reads from the mapped file, each checked against the file and the header limit."""

    def __init__(self, data: mmap.mmap, size: int, limit: int, items_to_keep: int):
        self.data = data
        self.size = size
        self.limit = limit
        self.pos = 0
        self.items_to_keep = items_to_keep  # array items this read may still decode into lists

    def keep(self, count: int) -> bool:
        """Whether an array of ``count`` items still fits the read's item budget (taking it if so)."""
        if count > self.items_to_keep:
            return False
        self.items_to_keep -= count
        return True

    def need(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.size:
            raise InvalidGGUF(
                f"file is truncated: {what} needs {n} bytes at offset {self.pos}, file has {self.size} bytes"
            )
        if self.pos + n > self.limit:
            raise InvalidGGUF(f"metadata is larger than the {self.limit}-byte limit (at {what})")
        start = self.pos
        self.pos += n
        return start

    def scalar(self, fmt: str, what: str) -> Any:
        start = self.need(struct.calcsize("<" + fmt), what)
        return struct.unpack_from("<" + fmt, self.data, start)[0]

    def string(self, what: str, max_length: int) -> str:
        length = self.scalar("Q", f"{what} length")
        if length > max_length:
            raise InvalidGGUF(f"{what} is {length} bytes long, limit is {max_length}")
        start = self.need(length, what)
        return bytes(self.data[start : start + length]).decode("utf-8", errors="replace")

    def strings(self, count: int, what: str, max_length: int, keep: bool) -> list[str] | None:
        """``count`` strings in a row (a vocabulary: tens of thousands), walked in one tight loop, each checked as
        :meth:`string` checks it; None when not ``keep``."""
        data, pos, end = self.data, self.pos, min(self.size, self.limit)
        length_at = _U64.unpack_from
        kept: list[str] | None = [] if keep else None
        for i in range(count):
            if pos + 8 > end:
                self.pos = pos
                self.need(8, f"item {i} of {what} length")  # raises, saying which limit
            length = length_at(data, pos)[0]
            if length > max_length:
                raise InvalidGGUF(f"item {i} of {what} is {length} bytes long, limit is {max_length}")
            start, pos = pos + 8, pos + 8 + length
            if pos > end:
                self.pos = start
                self.need(length, f"item {i} of {what}")
            if kept is not None:
                kept.append(data[start:pos].decode("utf-8", errors="replace"))
        self.pos = pos
        return kept


@dataclass(frozen=True)
class _Limits:
    max_metadata_bytes: int
    max_tensors: int
    max_kv: int
    max_string: int
    max_array: int
    skip_arrays_over: int | None
    keep_items: int


def _read_value(cur: _Cursor, value_type: int, key: str, limits: _Limits) -> tuple[Any, int | None]:
    """The value, and its item type when it is an array."""
    if value_type not in _VALUE_TYPES:
        raise InvalidGGUF(f"metadata key {key!r} has unknown value type {value_type}")
    fmt = _VALUE_TYPES[value_type][1]
    if fmt is not None:
        return cur.scalar(fmt, f"value of {key!r}"), None
    if value_type == _STRING:
        return cur.string(f"value of {key!r}", limits.max_string), None
    return _read_array(cur, key, limits)


def _read_array(cur: _Cursor, key: str, limits: _Limits) -> tuple[Any, int]:
    item_type = cur.scalar("I", f"array type of {key!r}")
    count = cur.scalar("Q", f"array length of {key!r}")
    if item_type not in _VALUE_TYPES or item_type == _ARRAY:
        raise InvalidGGUF(f"metadata key {key!r} is an array of unsupported type {item_type}")
    if count > limits.max_array:
        raise InvalidGGUF(f"metadata key {key!r} has {count} items, limit is {limits.max_array}")
    item_name, item_fmt = _VALUE_TYPES[item_type]
    skip = (limits.skip_arrays_over is not None and count > limits.skip_arrays_over) or not cur.keep(count)
    if item_fmt is not None:
        width = struct.calcsize(item_fmt)
        start = cur.need(count * width, f"array {key!r}")
        if skip:
            return SkippedArray(item_name, count), item_type
        values = array.array(item_fmt if item_fmt != "?" else "B")
        values.frombytes(cur.data[start : start + count * width])
        if sys.byteorder != "little":
            values.byteswap()
        return ([bool(v) for v in values] if item_fmt == "?" else values.tolist()), item_type
    # array of strings: each has its own length, so walk them (8 bytes minimum each)
    if count * 8 > cur.size - cur.pos:
        raise InvalidGGUF(f"file is truncated: array {key!r} claims {count} strings")
    strings = cur.strings(count, repr(key), limits.max_string, keep=not skip)
    return (SkippedArray(item_name, count) if strings is None else strings), item_type


def _read_tensor(cur: _Cursor, index: int) -> tuple[str, tuple[int, ...], int, int, int]:
    name = cur.string(f"name of tensor {index}", MAX_TENSOR_NAME)
    n_dims = cur.scalar("I", f"dimension count of tensor {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise InvalidGGUF(f"tensor {name!r} has {n_dims} dimensions, expected 1 to {MAX_DIMS}")
    shape = tuple(cur.scalar("Q", f"shape of tensor {name!r}") for _ in range(n_dims))
    ggml_type = cur.scalar("I", f"type of tensor {name!r}")
    if ggml_type not in GGML_TYPES:
        raise InvalidGGUF(f"tensor {name!r} has unknown ggml type {ggml_type}")
    offset = cur.scalar("Q", f"offset of tensor {name!r}")
    type_name, block, type_size = GGML_TYPES[ggml_type]
    elements = 1
    for dim in shape:
        elements *= dim
        if elements >= 1 << 62:
            raise InvalidGGUF(f"tensor {name!r} has an impossible shape {shape}")
    if shape[0] % block:
        raise InvalidGGUF(f"tensor {name!r}: dimension {shape[0]} is not a multiple of {type_name}'s block {block}")
    nbytes = elements // block * type_size
    return name, shape, ggml_type, offset, nbytes


def read_gguf(
    path: Path,
    *,
    max_metadata_bytes: int = 256 << 20,
    max_tensors: int = 1 << 16,
    max_kv: int = 1 << 16,
    max_string: int = 16 << 20,
    max_array: int = 1 << 24,
    skip_arrays_over: int | None = None,
    keep_items: int = DEFAULT_KEPT_ITEMS,
) -> GGUFFile:
    """Read and validate a GGUF file's header (versions 2 and 3, little-endian).

    ``skip_arrays_over``: arrays with more items than this (tokenizer vocabularies)
    are checked but returned as :class:`SkippedArray` instead of Python lists.
    ``keep_items``: arrays are decoded, in file order, while their items in all
    stay within this; an array that would pass it is a :class:`SkippedArray` too.
    """
    path = Path(path)
    try:
        file = open(path, "rb")
    except OSError as exc:
        raise InvalidGGUF(f"cannot open {path}: {exc.strerror or exc}") from None
    with file:
        size = path.stat().st_size
        if size < 24:
            raise InvalidGGUF(f"file is truncated: {size} bytes is too short for a GGUF header")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            limits = _Limits(max_metadata_bytes, max_tensors, max_kv, max_string, max_array, skip_arrays_over,
                             keep_items)
            return _parse(path, data, size, limits)


def _parse(path: Path, data: mmap.mmap, size: int, limits: _Limits) -> GGUFFile:
    cur = _Cursor(data, size, limits.max_metadata_bytes, limits.keep_items)
    magic = bytes(data[0:4])
    cur.need(4, "magic")
    if magic != MAGIC:
        # never the bytes themselves: a path given to /api/create could be any file on this machine
        raise InvalidGGUF(f"not a GGUF file (it does not start with the {MAGIC.decode()} magic bytes)")
    version = cur.scalar("I", "version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise InvalidGGUF("big-endian GGUF files are not supported")
        raise InvalidGGUF(f"unsupported GGUF version {version} (supported: 2, 3)")
    tensor_count = cur.scalar("Q", "tensor count")
    kv_count = cur.scalar("Q", "metadata count")
    if tensor_count > limits.max_tensors:
        raise InvalidGGUF(f"file claims {tensor_count} tensors, limit is {limits.max_tensors}")
    if kv_count > limits.max_kv:
        raise InvalidGGUF(f"file claims {kv_count} metadata entries, limit is {limits.max_kv}")

    metadata: dict[str, Any] = {}
    value_types: dict[str, tuple[int, int | None]] = {}
    for index in range(kv_count):
        key = cur.string(f"key of metadata entry {index}", 1 << 16)
        if key in metadata:
            raise InvalidGGUF(f"metadata key {key!r} appears twice")
        value_type = cur.scalar("I", f"value type of {key!r}")
        metadata[key], item_type = _read_value(cur, value_type, key, limits)
        value_types[key] = (value_type, item_type)

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise InvalidGGUF(f"general.alignment must be a power of two, got {alignment!r}")

    raw_tensors = [_read_tensor(cur, i) for i in range(tensor_count)]
    data_offset = -(-cur.pos // alignment) * alignment
    if data_offset > size:
        raise InvalidGGUF(f"file is truncated: tensor data would start at {data_offset}, file has {size} bytes")

    tensors: list[TensorInfo] = []
    seen: set[str] = set()
    for name, shape, ggml_type, offset, nbytes in raw_tensors:
        if name in seen:
            raise InvalidGGUF(f"tensor {name!r} appears twice")
        seen.add(name)
        if offset % alignment:
            raise InvalidGGUF(f"tensor {name!r} offset {offset} is not aligned to {alignment}")
        start = data_offset + offset
        if start + nbytes > size:
            raise InvalidGGUF(
                f"tensor {name!r} ({nbytes} bytes at {start}) extends beyond the end of the file ({size} bytes); "
                "the file is truncated or corrupt"
            )
        tensors.append(TensorInfo(name, shape, ggml_type, start, nbytes))
    ordered = sorted(tensors, key=lambda t: t.offset)
    for before, after in zip(ordered, ordered[1:]):
        if after.offset < before.offset + before.nbytes:
            raise InvalidGGUF(f"tensors {before.name!r} and {after.name!r} overlap")
    return GGUFFile(path, version, metadata, tensors, alignment, data_offset, size, value_types)
