"""``REQUIRES``: the oldest localllm a model may be created or run with.

A Modelfile's ``REQUIRES 0.2.0`` is kept in the model's config blob under
``requires`` (where Ollama keeps it), shown by ``show``, and compared with
``localllm.__version__`` by semantic-version precedence (a pre-release sorts
before its release), so a model built for a newer localllm is refused with both
versions named instead of failing in some stranger way later.
"""

from __future__ import annotations

import re

from .. import __version__

_SEMVER = re.compile(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


class ModelTooNew(ValueError):
    """A model that requires a newer localllm than this one."""


def parse_version(text: str) -> tuple[tuple[int, int, int], tuple[tuple[int, int | str], ...] | None]:
    """``1.2.3-rc.1`` as ``((1, 2, 3), ((1, 'rc'), (0, 1)))``; build metadata is ignored. ValueError if not a version."""
    match = _SEMVER.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a version such as 0.14.0")
    major, minor, patch, pre = match.groups()
    core = (int(major), int(minor or 0), int(patch or 0))
    if pre is None:
        return core, None
    return core, tuple((0, int(part)) if part.isdigit() else (1, part) for part in pre.split("."))


def normalize_requires(value: str) -> str:
    """A REQUIRES value as kept in the config: checked, without a leading ``v`` (as Ollama keeps it)."""
    parse_version(value)
    return value.strip().removeprefix("v")


def version_key(text: str) -> tuple:
    """A sort key giving semantic-version precedence: a release sorts after its pre-releases."""
    core, pre = parse_version(text)
    return (core, 1, ()) if pre is None else (core, 0, pre)


def check_requires(required: str, what: str, current: str = __version__) -> None:
    """Raise ModelTooNew when ``required`` is newer than ``current``; ``what`` names the model."""
    if version_key(required) > version_key(current):
        raise ModelTooNew(f"{what} requires localllm {required} or newer, but this is localllm {current}; "
                          "upgrade localllm to use it")
