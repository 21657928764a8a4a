"""Fuzzing: schemathesis against the daemon's own OpenAPI schema, hypothesis against the GGUF checker.

The daemon under fuzz has an empty store and dead Hugging Face / package-index /
registry endpoints, so no generated request can load a model or download anything:
every endpoint is exercised, each with a bounded number of examples, and
the whole run stays under a minute. Any 5xx other than a declared one fails,
and so does a daemon that stops answering: 503 (overload) anywhere, and 502
from a pull or push, which is what they answer when every source or the
registry is unreachable (as here, by construction).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from schemathesis import GenerationMode
from support.daemon import Daemon, free_port
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.gguf_builders import build_gguf, gguf_string, kv_string, kv_u32, tensor_info

from localllm.gguf import InvalidGGUF, read_gguf

EXAMPLES_PER_OPERATION = 40


def declared_5xx(status: int, path: str) -> bool:
    """Overload anywhere; a pull or push whose sources or registry are unreachable (registry/pull.py, push.py)."""
    return status == 503 or (status == 502 and path in ("/api/pull", "/api/push"))


@pytest.fixture(scope="module")
def fuzzed_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    instance = Daemon(tmp_path_factory.mktemp("fuzz")).start()
    try:
        yield instance
    finally:
        instance.stop()


def plausible_names(dead_url: str) -> st.SearchStrategy[str]:
    """Names that get past validation to the code behind it (random text rarely does)."""
    return st.sampled_from([
        "fuzz-missing", "smollm2:135m", "library/fuzz:7b", "hf.co/nobody/nothing:Q4_K_M", f"{dead_url}/m.gguf",
        f"{dead_url}/m.gguf#sha256={'0' * 64}", "../../etc/passwd", "a" * 300, "",
    ])  # fmt: skip


NAME_FIELDS = {"/api/copy": ("source", "destination")}


def fuzz_operation(operation: schemathesis.APIOperation, daemon: Daemon, failures: dict[str, str]) -> None:
    """Send up to EXAMPLES_PER_OPERATION generated requests; record (not raise) failures, so none is shrunk."""
    strategies = [operation.as_strategy(GenerationMode.POSITIVE)]
    if operation.body or operation.path_parameters or operation.query:
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE))  # bodies that break the schema
    names = plausible_names(f"http://127.0.0.1:{free_port()}")

    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=st.one_of(strategies), data=st.data())
    def send(case: schemathesis.Case, data: st.DataObject) -> None:
        if isinstance(case.body, dict) and data.draw(st.booleans()):
            for field in NAME_FIELDS.get(case.path, ("model",)):
                case.body[field] = data.draw(names)
            case.body["stream"] = data.draw(st.booleans())  # non-streamed answers take another code path
        response = case.call(base_url=daemon.url, timeout=30)
        if response.status_code >= 500 and not declared_5xx(response.status_code, case.path):
            key = f"{case.method} {case.path} -> {response.status_code}"
            failures.setdefault(key, f"body={case.body!r}: {response.text[:300]}")

    send()


def test_no_request_makes_the_daemon_fail(fuzzed_daemon: Daemon) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzzed_daemon.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 19  # every route of both dialects is in the schema
    failures: dict[str, str] = {}
    for operation in operations:
        fuzz_operation(operation, fuzzed_daemon, failures)
        assert fuzzed_daemon.process is not None and fuzzed_daemon.process.poll() is None, fuzzed_daemon.log()
    assert not failures, "server errors:\n" + "\n".join(f"{key}: {example}" for key, example in failures.items())


def test_the_fuzzed_daemon_is_still_healthy(fuzzed_daemon: Daemon) -> None:
    """Runs after the fuzzing: still answering, nothing registered by random bodies."""
    assert httpx.get(fuzzed_daemon.url, timeout=10).text == "localllm is running"
    assert httpx.get(f"{fuzzed_daemon.url}/api/tags", timeout=10).json() == {"models": []}


# -- the GGUF header checker -----------------------------------------------------------

#: A small valid file with every kind of field the checker walks: strings, scalars, arrays, tensors.
SEED = build_gguf(
    kv=[kv_string("general.architecture", "llama"), kv_u32("llama.context_length", 4096),
        gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + gguf_string("a") + gguf_string("bb"),
        gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0.5, -1.0)],
    tensors=[tensor_info("w", (32, 2), 0, 0), tensor_info("q", (64,), 8, 256)],
    data=b"\1" * 512,
)  # fmt: skip
HEADER_END = len(SEED) - 512


def only_invalid_gguf(path: Path, data: bytes) -> None:
    """The checker either accepts the bytes or raises InvalidGGUF: nothing else escapes."""
    path.write_bytes(data)
    try:
        read_gguf(path, skip_arrays_over=1)
    except InvalidGGUF:
        pass


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf-fuzz") / "model.gguf"


def test_the_seed_is_valid(scratch: Path) -> None:
    scratch.write_bytes(SEED)
    assert read_gguf(scratch).metadata["tokenizer.ggml.tokens"] == ["a", "bb"]


@settings(max_examples=300, deadline=2000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096))
def test_random_bytes_are_only_ever_invalid(scratch: Path, data: bytes) -> None:
    only_invalid_gguf(scratch, data)


@settings(max_examples=300, deadline=2000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096))
def test_random_bytes_after_a_real_magic_are_only_ever_invalid(scratch: Path, data: bytes) -> None:
    only_invalid_gguf(scratch, b"GGUF\x03\x00\x00\x00" + data)


@settings(max_examples=400, deadline=2000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(st.tuples(st.integers(0, HEADER_END - 1), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.one_of(st.none(), st.integers(0, len(SEED))),
)
def test_mutated_headers_are_only_ever_invalid(scratch: Path, edits: list[tuple[int, int]], cut: int | None) -> None:
    mutated = bytearray(SEED)
    for position, value in edits:
        mutated[position] = value
    only_invalid_gguf(scratch, bytes(mutated[:cut]))


@settings(max_examples=200, deadline=2000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    position=st.sampled_from([4, 8, 16, 24, 32]).flatmap(lambda p: st.integers(p, HEADER_END - 8)),
    value=st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63, 2**64 - 1]),
)
def test_hostile_integers_anywhere_in_the_header_are_only_ever_invalid(scratch: Path, position: int,
                                                                       value: int) -> None:
    """Counts, lengths, dimensions and offsets replaced with extreme 64-bit values."""
    mutated = bytearray(SEED)
    mutated[position : position + 8] = struct.pack("<Q", value)
    only_invalid_gguf(scratch, bytes(mutated))
