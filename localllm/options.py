"""Ollama's model options, named and typed once: ``options`` in requests, ``PARAMETER`` in Modelfiles.

The Modelfile parser types PARAMETER lines by :data:`OPTION_TYPES`; the daemon
types a request's options with :func:`checked` (an unknown name is warned
about and dropped, as Ollama does) and plans a load from :class:`LoadOptions`;
the runner builds :class:`CompletionOptions`, checking the types again so a
bad value is a 400 naming the option instead of a crash in the engine thread.
A known option of the wrong type is an :class:`OptionError` naming it.
Defaults follow ollama ``api/types.go`` ``DefaultOptions``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import Any

from localllm.config import ENGINES

log = logging.getLogger("localllm.options")


class OptionError(ValueError):
    """An option has a value of the wrong type or outside its range."""


#: Ollama's options (api/types.go ``Options`` and ``Runner``) and their types; ``stop`` repeats.
OPTION_TYPES: dict[str, type] = {
    "engine": str,  # localllm: "llama.cpp" or "native" for this model
    "speculative": str,  # localllm: "auto", "on" or "off" (exact speculative decoding, native engine)
    "draft": str,  # localllm: the name of a smaller model with the same vocabulary that drafts tokens
    "num_ctx": int,
    "num_batch": int,
    "num_gpu": int,
    "n_cpu_moe": int,  # llama.cpp's --n-cpu-moe: the first N layers keep their experts on the CPU (-1: planned)
    "num_worker_layers": int,  # localllm: layers on RPC workers (-1: only what does not fit this machine)
    "main_gpu": int,
    "use_mmap": bool,
    "num_thread": int,
    "kv_cache_type": str,  # localllm (LOCALLLM_KV_CACHE_TYPE for this model): f16, q8_0, q4_0
    "num_keep": int,
    "seed": int,
    "num_predict": int,
    "top_k": int,
    "top_p": float,
    "min_p": float,
    "typical_p": float,
    "repeat_last_n": int,
    "temperature": float,
    "repeat_penalty": float,
    "presence_penalty": float,
    "frequency_penalty": float,
    "mirostat": int,
    "mirostat_tau": float,
    "mirostat_eta": float,
    "stop": list,
}
#: Exact speculative decoding (option ``speculative``): where it pays, always, never.
SPECULATIVE_MODES = ("auto", "on", "off")
#: What the daemon adds to a completion's options for the runner (from API fields, not Ollama options).
_RUNNER_TYPES = {**OPTION_TYPES, "logprobs": bool, "top_logprobs": int}
_NOUNS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", list: "a list of strings"}


def coerce(name: str, value: Any, kind: type) -> Any:
    """A decoded JSON ``value`` as option ``name`` of type ``kind`` (a single string is a one-item list)."""
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
            return list(value)
    raise OptionError(f"option {name!r} must be {_NOUNS[kind]}, got {value!r}")


def checked(options: dict[str, Any] | None) -> dict[str, Any]:
    """A request's options typed; unknown names are logged and dropped, nulls dropped."""
    result: dict[str, Any] = {}
    for name, value in (options or {}).items():
        kind = OPTION_TYPES.get(name)
        if kind is None:
            log.warning("invalid option provided: %s (ignored)", name)
            continue
        if value is not None:
            result[name] = coerce(name, value, kind)
    if result.get("engine") not in (None, *ENGINES):
        raise OptionError(f"option 'engine' must be one of {', '.join(ENGINES)}, got {result['engine']!r}")
    _check_speculative(result)
    if result.get("num_gpu", -1) < -1:
        raise OptionError(f"option 'num_gpu' must be -1 (as many layers as fit) or a count of layers from 0 up, "
                          f"got {result['num_gpu']}")
    if result.get("n_cpu_moe", -1) < -1:
        raise OptionError(f"option 'n_cpu_moe' must be -1 (the experts that do not fit the GPU stay on the CPU) or "
                          f"a count of layers from 0 up, got {result['n_cpu_moe']}")
    return result


def _check_speculative(options: dict[str, Any]) -> None:
    if options.get("speculative") not in (None, *SPECULATIVE_MODES):
        raise OptionError(f"option 'speculative' must be one of {', '.join(SPECULATIVE_MODES)}, "
                          f"got {options['speculative']!r}")


@dataclass(frozen=True)
class LoadOptions:
    """What a completion's (checked) options ask of the model's load; ``None``: the daemon decides."""

    engine: str | None = None
    num_ctx: int | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    n_cpu_moe: int | None = None
    num_worker_layers: int | None = None
    num_thread: int | None = None
    kv_cache_type: str | None = None

    @classmethod
    def of(cls, options: dict[str, Any]) -> LoadOptions:
        return cls(**{f.name: options.get(f.name) for f in fields(cls)})


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
            if options.get(f.name) is not None:
                values[f.name] = coerce(f.name, options[f.name], _RUNNER_TYPES[f.name])
        if "stop" in values:
            values["stop"] = tuple(s for s in values["stop"] if s)
        if not 0 <= values.get("top_logprobs", 0) <= 20:
            raise OptionError("option 'top_logprobs' must be between 0 and 20")
        if values.get("num_ctx", 0) < 0:
            raise OptionError(f"option 'num_ctx' must not be negative, got {values['num_ctx']}")
        if values.get("mirostat", 0) not in (0, 1, 2):
            raise OptionError("option 'mirostat' must be 0, 1 or 2")
        _check_speculative(values)
        return cls(**values)
