"""The daemon's runners get every setting on their command line (``RunnerConfig``), none from the
environment: a runner sees none of the daemon's ``LOCALLLM_*`` variables."""

from __future__ import annotations

from pathlib import Path

import httpx
from support.daemon import Daemon


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().partition("=")[::2] for entry in entries if entry)


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_runner_settings_travel_in_argv_not_environment(daemon: Daemon) -> None:
    answer = httpx.post(f"{daemon.url}/api/generate", json={"model": "smollm2:135m", "prompt": "Hi",
                                                            "stream": False, "options": {"num_predict": 1}}, timeout=300)
    assert answer.status_code == 200, answer.text
    assert "LOCALLLM_MODELS" in daemon.env  # the daemon itself runs with LOCALLLM_* settings
    pids = daemon.runner_pids()
    assert pids
    for pid in pids:
        assert [key for key in _environ(pid) if key.startswith("LOCALLLM_")] == []
        argv = _argv(pid)
        for flag in ("--ctx", "--parallel", "--engine", "--kv-cache-type", "--stream-interval", "--worker-timeout"):
            assert flag in argv, argv
