"""Shared fixtures: real model files (cached outside the repo)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import fixtures  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return fixtures.smollm2_gguf()


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return fixtures.gemma3_gguf()


@pytest.fixture(scope="session")
def daemon(tmp_path_factory, smollm2_path):
    """One real daemon for the session, with ``smollm2:135m`` in its store."""
    from daemon_helpers import Daemon

    instance = Daemon(tmp_path_factory.mktemp("daemon"), LOCALLLM_KEEP_ALIVE="10m").start()
    try:
        instance.create("smollm2:135m", f"FROM {smollm2_path}")
        yield instance
    finally:
        instance.stop()
