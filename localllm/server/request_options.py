"""Model options (``options`` in requests, ``PARAMETER`` in Modelfiles): typed and merged.

As Ollama does, an unknown option name is warned about and ignored, while a
known option of the wrong type is a 400 that names it.
"""

from __future__ import annotations

import logging
from typing import Any

from ..config import ENGINES, SettingsError, parse_duration
from ..registry.modelfile import PARAMETER_TYPES
from .errors import bad_request

log = logging.getLogger("localllm.options")


def _typed(name: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    elif kind is list:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    noun = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
            list: "a list of strings"}[kind]
    raise bad_request(f"option {name!r} must be {noun}, got {value!r}")


def validate_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Type-check request options; unknown names are logged and dropped."""
    result: dict[str, Any] = {}
    for name, value in (options or {}).items():
        kind = PARAMETER_TYPES.get(name)
        if kind is None:
            log.warning("invalid option provided: %s (ignored)", name)
            continue
        if value is None:
            continue
        result[name] = _typed(name, value, list if kind is list or name == "stop" else kind)
    if result.get("engine") not in (None, *ENGINES):
        raise bad_request(f"option 'engine' must be one of {', '.join(ENGINES)}, got {result['engine']!r}")
    return result


def merge_options(model_parameters: dict[str, Any], request_options: dict[str, Any] | None) -> dict[str, Any]:
    """The model's Modelfile parameters overridden by the request's options."""
    merged = dict(model_parameters)
    merged.update(validate_options(request_options))
    return merged


def keep_alive_seconds(value: str | float | int | None, default: float | None) -> float | None:
    """A request's ``keep_alive`` in seconds; ``None`` keeps the model forever."""
    if value is None or value == "":
        return default
    try:
        return parse_duration(value, default)
    except SettingsError as exc:
        raise bad_request(f"invalid keep_alive: {exc}") from None
