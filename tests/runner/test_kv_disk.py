"""The prefix cache's disk tier: KV blocks that outlive the runner, and every way their files can go wrong.

The pool tests use a real native context of a tiny model, so the bytes that go
to disk and come back are real KV blocks. The runner tests stop a SmolLM2
runner, start another on the same directory and check that the prompt comes
back from disk with exactly the tokens and log-probabilities a cold runner
computes (the native engine's logits are batch-invariant, so restored KV must
equal recomputed KV bit for bit). Each fault (truncated, corrupt, another
model's, another KV type's, half-written, an unwritable directory, two runners
on one directory) must leave the answer unchanged.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.backends.native import backend as native
from localllm.runner.kv_blocks import BlockPool
from localllm.runner.kv_disk import MAGIC, SUFFIX, DiskTier, chain_key, clear
from support.native import BLOCK, tiny_block_store
from support.runner import RunnerProcess, complete, runner_threads

BS = BLOCK  # the tiny store's block size


@pytest.fixture
def store(tmp_path: Path) -> Iterator[native.Context]:
    with tiny_block_store(tmp_path, 4) as ctx:
        yield ctx


def tier(root: Path, store: native.Context, budget: int = 1 << 30, digest: str = "sha256-test",
         kv_type: str = "f16") -> DiskTier:
    return DiskTier(root, digest, budget, engine="native", kv_type=kv_type, block_size=BS, layout="tiny",
                    block_bytes=store.block_bytes)


def run(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def fill(store: native.Context, pool: BlockPool, tokens: list[int], seed: int) -> list[bytes]:
    """A sequence holding ``tokens`` with recognisable bytes in its blocks, committed and released (cached)."""
    blocks = [pool.allocate() for _ in range(len(tokens) // BS)]
    for i, block in enumerate(blocks):
        store.write_block(block, bytes([(seed + i) % 256]) * store.block_bytes)
    written = [store.read_block(b) for b in blocks]
    nodes: list = [None] * len(blocks)
    pool.commit(blocks, nodes, tokens)
    pool.release(blocks, nodes, tokens, keep=True)
    return written


# -- the tier and the pool on their own -----------------------------------------------


def test_evicted_blocks_go_to_disk_and_a_new_pool_reads_them_back_bit_for_bit(tmp_path: Path,
                                                                               store: native.Context) -> None:
    pool = BlockPool(store, 4, BS, disk=tier(tmp_path, store))
    written = fill(store, pool, run(32), seed=3)
    fill(store, pool, run(64, 1000), seed=9)  # needs every block: the first sequence's go to disk
    assert pool.disk.writes == 2 and pool.match(run(32)).tokens == 32
    fresh = BlockPool(store, 4, BS, disk=tier(tmp_path, store))  # another runner, same directory
    found = fresh.match(run(32) + [7])
    assert found.tokens == 32 and fresh.stats.disk_restores == 2
    assert [store.read_block(b) for b in found.blocks] == written
    fresh.check()
    files = list(fresh.disk.dir.glob(f"*{SUFFIX}"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


def test_persist_writes_every_full_cached_block_and_the_keys_chain_the_tokens(tmp_path: Path,
                                                                             store: native.Context) -> None:
    pool = BlockPool(store, 4, BS, disk=tier(tmp_path, store))
    fill(store, pool, run(40), seed=1)  # two full blocks and a partial one (never written)
    assert pool.persist() == 2
    first = chain_key(chain_key(b"\0" * 16, run(16)), run(16, 16))
    assert (pool.disk.dir / f"{first.hex()}{SUFFIX}").is_file()
    assert chain_key(chain_key(b"\0" * 16, run(16, 1)), run(16, 16)) != first  # the key holds the whole path


def test_the_budget_deletes_the_least_recently_used_files(tmp_path: Path, store: native.Context) -> None:
    probe = tier(tmp_path / "probe", store)
    assert probe.write(chain_key(b"", [0]), bytes(store.block_bytes))
    size = next(probe.dir.glob(f"*{SUFFIX}")).stat().st_size
    disk = tier(tmp_path / "kv", store, budget=10 * size)
    keys = [chain_key(b"", [i]) for i in range(10)]
    for i, key in enumerate(keys):
        assert disk.write(key, bytes([i]) * store.block_bytes)
        os.utime(disk._path(key), ns=(10**18 + i * 10**9,) * 2)  # used in this order
    assert disk.read(keys[0]) is not None  # used again: now the most recent
    assert disk.write(chain_key(b"", [99]), bytes(store.block_bytes))  # over the budget: the oldest go
    assert sum(f.stat().st_size for f in disk.dir.glob(f"*{SUFFIX}")) <= 10 * size
    assert disk.read(keys[0]) is not None and disk.read(keys[1]) is None and disk.read(keys[9]) is not None


def test_a_block_larger_than_the_budget_is_never_written(tmp_path: Path, store: native.Context) -> None:
    disk = tier(tmp_path, store, budget=1024)
    assert not disk.write(chain_key(b"", [1]), bytes(store.block_bytes))
    assert not list(tmp_path.rglob(f"*{SUFFIX}"))


def test_writers_and_readers_on_one_directory_never_see_half_a_file(tmp_path: Path, store: native.Context) -> None:
    """Two runners (here: tiers) writing the same blocks while a third reads them: every read is whole or absent."""
    keys = [chain_key(b"", [i]) for i in range(40)]
    data = {key: bytes([i]) * store.block_bytes for i, key in enumerate(keys)}
    reader = tier(tmp_path, store)
    seen: list[bool] = []
    done = threading.Event()

    def write(disk: DiskTier) -> None:
        for key in keys:
            assert disk.write(key, data[key])

    def read() -> None:
        while not done.is_set():
            for key in keys:
                got = reader.read(key)
                if got is not None:
                    seen.append(got == data[key])

    threads = [threading.Thread(target=write, args=(tier(tmp_path, store),)) for _ in range(2)]
    watcher = threading.Thread(target=read)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert reader.dropped == 0 and all(seen)
    assert not list(reader.dir.glob(".*.tmp"))


def test_a_dead_runners_temporary_file_is_removed_and_a_live_ones_kept(tmp_path: Path, store: native.Context) -> None:
    disk = tier(tmp_path, store)
    key = chain_key(b"", [5]).hex()
    dead = disk.dir / f".{key}.999999999.abcd.tmp"
    live = disk.dir / f".{key}.{os.getpid()}.abcd.tmp"
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    tier(tmp_path, store)
    assert not dead.exists() and live.exists()


def test_clear_removes_one_models_blocks_or_all(tmp_path: Path, store: native.Context) -> None:
    root = tmp_path / "kv"
    for digest in ("sha256-" + "a" * 64, "sha256-" + "b" * 64):
        assert tier(root, store, digest=digest).write(chain_key(b"", [1]), bytes(store.block_bytes))
    assert clear(root, "sha256-" + "a" * 64) > 0
    assert not (root / ("sha256-" + "a" * 64)).exists() and (root / ("sha256-" + "b" * 64)).exists()
    assert clear(root) > 0 and not list(root.iterdir())


# -- a runner restarted on its blocks -------------------------------------------------------

PROMPT = "<|im_start|>system\n" + "You answer questions about the history of old cities in Europe. " * 40 + \
    "<|im_end|>\n<|im_start|>user\nName one old city.<|im_end|>\n<|im_start|>assistant\n"
GREEDY: dict[str, Any] = {"temperature": 0, "num_predict": 12, "logprobs": True, "top_logprobs": 3}


def runner_args(kv_dir: Path, budget: int = 1 << 30) -> tuple[str, ...]:
    return ("--engine", "native", "--ctx", "2048", "--threads", runner_threads(), "--kv-disk", str(kv_dir),
            "--kv-disk-bytes", str(budget))


def answer(model: Path, kv_dir: Path, budget: int = 1 << 30, **popen: Any) -> tuple[str, dict[str, Any], dict]:
    """One greedy answer from a fresh runner on ``kv_dir`` (stopped afterwards, which writes its blocks)."""
    runner = RunnerProcess(model, *runner_args(kv_dir, budget), **popen)
    try:
        runner.wait_ready()
        with runner.client() as client:
            text, done = greedy(client)
            disk = client.get("/health").json()["kv_disk"]
        assert runner.stop() == 0, runner.stderr
    finally:
        runner.cleanup()
    return text, done, disk


def greedy(client: Any) -> tuple[str, dict[str, Any]]:
    """The greedy answer to PROMPT: its text, and the final object with every token's log-probabilities."""
    events = []
    with client.stream("POST", "/completion", json={"prompt": PROMPT, "options": GREEDY}) as r:
        assert r.status_code == 200, r.read()
        events = [json.loads(line) for line in r.iter_lines() if line.strip()]
    done = events[-1]
    assert done.get("done"), done
    done["logprobs"] = [entry for e in events for entry in e.get("logprobs", [])]
    assert len(done["logprobs"]) == done["eval_count"]
    return "".join(e.get("content", "") for e in events), done


def block_files(kv_dir: Path) -> list[Path]:
    return sorted(kv_dir.glob(f"*/*/*{SUFFIX}"))


@pytest.fixture(scope="module")
def cold(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list, Path]:
    """The cold answer (nothing on disk), and a directory holding the blocks its runner left."""
    kv_dir = tmp_path_factory.mktemp("kv")
    text, done, disk = answer(smollm2_path, kv_dir)
    assert done["cached_tokens"] == 0 and disk["reads"] == 0
    assert len(block_files(kv_dir)) >= done["prompt_eval_count"] // BS
    return text, [e["top_logprobs"] for e in done["logprobs"]], kv_dir


def restart(smollm2_path: Path, cold: tuple[str, list, Path], tmp_path: Path,
            damage: Callable[[list[Path]], None] | None = None) -> tuple[dict[str, Any], dict]:
    """A runner started on a copy of the cold run's blocks (damaged first); its answer must be the cold one."""
    text, logprobs, source = cold
    kv_dir = tmp_path / "kv"
    for f in block_files(source):
        target = kv_dir / f.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    if damage is not None:
        damage(block_files(kv_dir))
    got, done, disk = answer(smollm2_path, kv_dir)
    assert got == text
    assert [e["top_logprobs"] for e in done["logprobs"]] == logprobs
    return done, disk


def test_a_restarted_runner_reads_the_prompt_from_disk_with_the_cold_answer(smollm2_path: Path, cold,
                                                                            tmp_path: Path) -> None:
    done, disk = restart(smollm2_path, cold, tmp_path)
    assert done["cached_tokens"] >= done["prompt_eval_count"] and disk["reads"] > 0 and disk["dropped"] == 0


def _rewrite_header(field: str, value: Any) -> Callable[[list[Path]], None]:
    def damage(files: list[Path]) -> None:
        for f in files:
            data = f.read_bytes()
            (n,) = struct.unpack_from("<I", data, len(MAGIC))
            header = json.loads(data[len(MAGIC) + 4: len(MAGIC) + 4 + n])
            header[field] = value
            raw = json.dumps(header).encode()
            f.write_bytes(MAGIC + struct.pack("<I", len(raw)) + raw + data[len(MAGIC) + 4 + n:])
    return damage


def _truncate(files: list[Path]) -> None:
    for f in files:
        os.truncate(f, f.stat().st_size // 2)


def _corrupt(files: list[Path]) -> None:
    for f in files:
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x40
        f.write_bytes(bytes(data))


def _killed_mid_write(files: list[Path]) -> None:
    """What a runner killed while writing leaves: its temporary files, and (had it written in place) short files."""
    for f in files:
        (f.parent / f".{f.stem}.999999999.dead.tmp").write_bytes(f.read_bytes()[:1000])
        os.truncate(f, 1000)


@pytest.mark.parametrize("damage", [_truncate, _corrupt, _rewrite_header("digest", "sha256-" + "0" * 64),
                                    _rewrite_header("kv_type", "q8_0"), _killed_mid_write],
                         ids=["truncated", "corrupt", "another-model", "another-kv-type", "killed-mid-write"])
def test_an_unusable_block_file_is_dropped_and_recomputed_with_the_same_answer(smollm2_path: Path, cold,
                                                                             tmp_path: Path, damage) -> None:
    done, disk = restart(smollm2_path, cold, tmp_path, damage)
    assert done["cached_tokens"] == 0 and disk["reads"] == 0 and disk["dropped"] >= 1
    assert not list((tmp_path / "kv").rglob("*.tmp"))


def test_a_failing_disk_stops_the_tier_writing_and_requests_go_on(smollm2_path: Path, cold, tmp_path: Path) -> None:
    """A file size limit below one block makes every write fail mid-file (EFBIG, as a full disk's ENOSPC)."""
    text, logprobs, _ = cold
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))  # the runner inherits it
    try:
        runner = RunnerProcess(smollm2_path, *runner_args(tmp_path / "kv", budget=1 << 30), "--cache-ram-mb", "0",
                               "--kv-tokens", "640")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        runner.wait_ready()
        with runner.client() as client:
            greedy(client)
            complete(client, "A different prompt that takes the blocks of the first. " * 30, temperature=0,
                     num_predict=4)  # evicts the first prompt's blocks: their writes fail
            got, done = greedy(client)
            disk = client.get("/health").json()["kv_disk"]
        assert runner.stop() == 0, runner.stderr
        log = runner.stderr
    finally:
        runner.cleanup()
    assert got == text and [e["top_logprobs"] for e in done["logprobs"]] == logprobs
    assert disk["writing"] is False and disk["writes"] == 0, (disk, done["prompt_eval_count"])
    assert log.count("KV disk tier: cannot write") == 1
    assert not block_files(tmp_path / "kv") and not list((tmp_path / "kv").rglob("*.tmp"))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB file system (tmpfs): room for five of SmolLM2's blocks, then ENOSPC."""
    mount = tmp_path / "small"
    mount.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)],
                                 capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command: a full disk cannot be made here")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_tier_writing_and_requests_go_on(smollm2_path: Path, cold, small_disk: Path) -> None:
    text, logprobs, _ = cold
    runner = RunnerProcess(smollm2_path, *runner_args(small_disk / "kv", budget=1 << 30))
    try:
        runner.wait_ready()
        with runner.client() as client:
            got, done = greedy(client)
        assert runner.stop() == 0, runner.stderr  # stopping writes the prompt's blocks: the disk fills up
        log = runner.stderr
    finally:
        runner.cleanup()
    assert got == text and [e["top_logprobs"] for e in done["logprobs"]] == logprobs
    assert log.count("KV disk tier: cannot write") == 1 and "No space left on device" in log, log
    written = block_files(small_disk / "kv")
    assert 0 < len(written) < done["prompt_eval_count"] // BS and not list(small_disk.rglob("*.tmp"))
    again, done = answer(smollm2_path, small_disk / "kv")[:2]  # the blocks that fitted are read back
    assert again == text and done["cached_tokens"] == len(written) * BS


def test_two_runners_on_one_directory_write_and_read_the_same_blocks(smollm2_path: Path, cold,
                                                                      tmp_path: Path) -> None:
    text, logprobs, _ = cold
    kv_dir = tmp_path / "kv"
    runners = [RunnerProcess(smollm2_path, *runner_args(kv_dir)) for _ in range(2)]
    try:
        for runner in runners:
            runner.wait_ready()
        results: list[tuple[str, dict]] = []
        threads = []
        for runner in runners:
            def one(r: RunnerProcess = runner) -> None:
                with r.client() as client:
                    results.append(greedy(client))
            threads.append(threading.Thread(target=one))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for runner in runners:  # both write the same blocks at once
            runner.proc.terminate()
        assert [runner.proc.wait(60) for runner in runners] == [0, 0]
    finally:
        for runner in runners:
            runner.cleanup()
    assert len(results) == 2 and all(got == text for got, _ in results)
    assert not list(kv_dir.rglob("*.tmp"))
    done, disk = restart(smollm2_path, (text, logprobs, kv_dir), tmp_path / "again")
    assert done["cached_tokens"] > 0 and disk["dropped"] == 0


# -- through the daemon -----------------------------------------------------------------------


def wait_unloaded(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{url}/api/ps", timeout=10).json()["models"]:
        assert time.monotonic() < deadline, "the model was not unloaded"
        time.sleep(0.1)


def test_a_daemon_restart_answers_from_disk_and_rm_and_cache_clear_delete_the_blocks(smollm2_path: Path,
                                                                                     tmp_path: Path) -> None:
    from support.daemon import Daemon

    body = {"model": "kvd", "prompt": PROMPT, "raw": True, "stream": False, "logprobs": True, "top_logprobs": 3,
            "options": {"temperature": 0, "num_predict": 12}}
    daemon = Daemon(tmp_path, LOCALLLM_ENGINE="native", LOCALLLM_NUM_THREADS=runner_threads())
    kv_dir = tmp_path / "state" / "kv-cache"
    try:
        daemon.start()
        daemon.create("kvd", f"FROM {smollm2_path}")
        cold = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        daemon.stop()  # the daemon's shutdown stops the runner, which writes its blocks
        assert block_files(kv_dir)
        daemon.start()
        warm = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        assert (warm["response"], warm["logprobs"]) == (cold["response"], cold["logprobs"])
        assert warm["prompt_eval_count"] < cold["prompt_eval_count"] // 10  # the rest came from disk

        daemon.create("other", f"FROM {smollm2_path}\nPARAMETER temperature 0")  # same weights, same blocks
        cleared = subprocess.run([sys.executable, "-m", "localllm", "cache", "clear"], env=daemon.env,
                                 capture_output=True, text=True, timeout=60)
        assert cleared.returncode == 0 and "cleared" in cleared.stdout, cleared.stderr
        unload = {"model": "other", "keep_alive": 0}  # a copy: the same runner
        assert httpx.post(f"{daemon.url}/api/generate", json=unload, timeout=60).status_code == 200
        wait_unloaded(daemon.url)
        assert not block_files(kv_dir)  # the runner loaded before the clear did not write its blocks
        httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300)
        assert httpx.post(f"{daemon.url}/api/generate", json=unload, timeout=60).status_code == 200
        wait_unloaded(daemon.url)
        assert block_files(kv_dir)  # one loaded after it did, when it was unloaded
        assert httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "kvd"}).status_code == 200
        assert not block_files(kv_dir)  # rm takes the model's cached prompts with it
        missing = httpx.request("DELETE", f"{daemon.url}/api/cache", json={"model": "kvd"})
        assert missing.status_code == 404 and "kvd" in missing.text
    finally:
        daemon.stop()


def test_two_daemons_on_one_cache_directory_share_the_blocks_and_never_read_half_files(smollm2_path: Path,
                                                                                      tmp_path: Path) -> None:
    from support.daemon import Daemon

    body = {"model": "kvd", "prompt": PROMPT, "raw": True, "stream": False, "logprobs": True, "top_logprobs": 3,
            "options": {"temperature": 0, "num_predict": 12}}
    shared = tmp_path / "kv"
    daemons = [Daemon(tmp_path / name, LOCALLLM_ENGINE="native", LOCALLLM_NUM_THREADS=runner_threads(),
                      LOCALLLM_KV_DISK_DIR=str(shared)) for name in ("a", "b")]
    try:
        answers = []
        for daemon in daemons:
            daemon.start()
            daemon.create("kvd", f"FROM {smollm2_path}")  # the same file: the same digest, the same blocks
            answers.append(httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json())
        stoppers = [threading.Thread(target=daemon.stop) for daemon in daemons]  # both write the blocks at once
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        assert block_files(shared) and not list(shared.rglob("*.tmp"))
        daemons[1].start()
        again = httpx.post(f"{daemons[1].url}/api/generate", json=body, timeout=300).json()
    finally:
        for daemon in daemons:
            daemon.stop()
    assert answers[0]["response"] == answers[1]["response"] == again["response"]
    assert answers[0]["logprobs"] == again["logprobs"]
    assert again["prompt_eval_count"] < answers[0]["prompt_eval_count"] // 10
    assert "dropping unusable block file" not in daemons[1].log_path.read_text()
