"""A request's options as the daemon takes them: checked (:mod:`localllm.options`), a bad
one a 400 naming it, merged over the model's Modelfile parameters; and its ``keep_alive``."""

from __future__ import annotations

from typing import Any

from ..config import SettingsError, parse_duration
from ..options import OptionError, checked
from .errors import bad_request


def validate_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Type-check request options (400 naming a bad one); unknown names are logged and dropped."""
    try:
        return checked(options)
    except OptionError as exc:
        raise bad_request(str(exc)) from None


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
