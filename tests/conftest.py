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
