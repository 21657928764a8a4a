"""Typing of ``/set parameter NAME VALUE`` values for the API's ``options``.

The REPL reads every value as text, but the daemon expects JSON numbers,
booleans and string lists (a wrong type is a 400), so the value is converted
here by the option's type, as Ollama's ``api.FormatParams`` does.
"""

from __future__ import annotations

from typing import Any

_INT = ("num_keep", "seed", "num_predict", "top_k", "repeat_last_n", "mirostat", "num_ctx", "num_batch",
        "num_gpu", "main_gpu", "num_thread")
_FLOAT = ("top_p", "min_p", "typical_p", "temperature", "repeat_penalty", "presence_penalty",
          "frequency_penalty", "mirostat_tau", "mirostat_eta")
_BOOL = ("penalize_newline", "numa", "use_mmap")
_LIST = ("stop",)

OPTION_TYPES: dict[str, type] = {
    **{name: int for name in _INT},
    **{name: float for name in _FLOAT},
    **{name: bool for name in _BOOL},
    **{name: list for name in _LIST},
}


def parse_parameter(name: str, values: list[str]) -> Any:
    """The typed value of option ``name`` given its words; ``ValueError`` names the problem."""
    kind = OPTION_TYPES.get(name)
    if kind is None:
        raise ValueError(f"unknown parameter '{name}'")
    if not values:
        raise ValueError(f"parameter '{name}' needs a value")
    if kind is list:
        return list(values)
    text = values[0]
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "t", "true"):
            return True
        if lowered in ("0", "f", "false"):
            return False
        raise ValueError(f"invalid bool value {text!r} for '{name}'")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"invalid {kind.__name__} value {text!r} for '{name}'") from None
