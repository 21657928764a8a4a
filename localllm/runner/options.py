"""The Ollama request options the runner honours, with Ollama's defaults.

The daemon validates names and types for the user (warning on unknown
names); the runner still checks the types of the options it uses, so a bad
value is a 400 naming the option instead of a crash in the engine thread.
Defaults follow ollama ``api/types.go`` ``DefaultOptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from localllm.runner.speculation import MODES as SPECULATIVE_MODES


class OptionError(ValueError):
    """An option has a value of the wrong type or outside its range."""


@dataclass(frozen=True)
class CompletionOptions:
    """Sampling and stopping options of one completion request."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    typical_p: float = 1.0
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    seed: int = -1
    num_predict: int = -1
    num_keep: int = 4
    stop: tuple[str, ...] = field(default_factory=tuple)
    logprobs: bool = False  # report each token's log-probability
    top_logprobs: int = 0  # and this many most likely alternatives
    speculative: str = "auto"  # draft and verify several tokens a step: auto (where it pays), on, off
    draft: str = ""  # the draft model's file (the daemon resolves the model name); empty: prompt lookup
    num_ctx: int = 0  # this request's context, bounding its sequence; 0: the runner's

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None) -> CompletionOptions:
        """Build from an Ollama ``options`` object; names we do not use are ignored."""
        if options is None:
            return cls()
        if not isinstance(options, dict):
            raise OptionError("options must be an object")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in options or options[f.name] is None:
                continue
            values[f.name] = _coerce(f.name, f.type, options[f.name])
        if not 0 <= values.get("top_logprobs", 0) <= 20:
            raise OptionError("option 'top_logprobs' must be between 0 and 20")
        if values.get("num_ctx", 0) < 0:
            raise OptionError(f"option 'num_ctx' must not be negative, got {values['num_ctx']}")
        if values.get("mirostat", 0) not in (0, 1, 2):
            raise OptionError("option 'mirostat' must be 0, 1 or 2")
        if values.get("speculative", "auto") not in SPECULATIVE_MODES:
            raise OptionError(
                f"option 'speculative' must be one of {', '.join(SPECULATIVE_MODES)}, got {values['speculative']!r}"
            )
        return cls(**values)


def _coerce(name: str, kind: str, value: Any) -> Any:
    if kind == "bool":
        if not isinstance(value, bool):
            raise OptionError(f"option {name!r} must be true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
            raise OptionError(f"option {name!r} must be an integer, got {value!r}")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OptionError(f"option {name!r} must be a number, got {value!r}")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise OptionError(f"option {name!r} must be a string, got {value!r}")
        return value
    # stop: a list of strings (a single string is accepted, as Ollama's clients send both)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise OptionError(f"option {name!r} must be a list of strings, got {value!r}")
    return tuple(s for s in value if s)
