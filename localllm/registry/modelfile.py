"""Ollama Modelfiles: parse them, write them back, type their PARAMETERs.

The syntax is Ollama's (``parser/parser.go``): one instruction a line, names
case-insensitive, ``#`` comments, and values that run to the end of the line
unless they start with ``"`` or ``\"\"\"``, in which case they run (across lines)
to the line that ends with the same quote. There are no escape sequences, so
``format_modelfile`` picks, for each value, a spelling that reads back to
exactly that value, and refuses one that has none rather than writing a file
that would mean something else.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..options import OPTION_TYPES
from ..templates.families import UnknownFormat, format_named
from .requires import normalize_requires

log = logging.getLogger(__name__)

INSTRUCTIONS = ("from", "parameter", "template", "system", "message", "adapter", "license", "requires", "parser",
                "renderer")
MESSAGE_ROLES = ("system", "user", "assistant", "tool")

#: Accepted in Modelfiles for compatibility, ignored with a warning (as Ollama does).
DEPRECATED_PARAMETERS = frozenset({"penalize_newline", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mlock"})

_BLANK = " \t"
_PARAM_NAME = re.compile(r"[A-Za-z0-9_]+")
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class ModelfileError(ValueError):
    """A Modelfile that cannot be read or written; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


@dataclass
class Modelfile:
    from_: str
    parameters: list[tuple[str, str]] = field(default_factory=list)
    template: str | None = None
    system: str | None = None
    messages: list[dict] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)
    license: list[str] = field(default_factory=list)
    requires: str | None = None
    projectors: list[str] = field(default_factory=list)  # FROM lines after the first: vision projector files
    parser: str | None = None  # PARSER: the chat format the output is read in (Ollama's names)
    renderer: str | None = None  # RENDERER: the chat format prompts are written in


# ----------------------------------------------------------------------------- values


def _unquote(s: str) -> str | None:
    """Ollama's unquote: the value, or None while a quote is still open."""
    if s.startswith('"""'):
        return s[3:-3] if len(s) >= 6 and s.endswith('"""') else None
    if s.startswith('"'):
        return s[1:-1] if len(s) >= 2 and s.endswith('"') else None
    return s


def _read_value(lines: list[str], i: int, first: str) -> tuple[str, int]:
    """The value starting with ``first`` on line ``i``; returns it and the next line index."""
    buf, j = first, i
    while (value := _unquote(buf.strip(_BLANK))) is None:
        j += 1
        if j >= len(lines):
            raise ModelfileError("unterminated quoted string (no closing quote before the end)", i + 1)
        buf += "\n" + lines[j]
    return value, j + 1


def _lines(text: str) -> list[str]:
    return text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")


def _quote(value: str, what: str) -> str:
    """A spelling of ``value`` that ``_read_value`` reads back unchanged."""
    if not isinstance(value, str):
        raise ModelfileError(f"{what} must be text, not {type(value).__name__}")
    multiline = "\n" in value
    candidates = [value] if value else []
    candidates += [f'"""{value}"""', f'"{value}"'] if multiline else [f'"{value}"', f'"""{value}"""']
    for candidate in candidates:
        lines = _lines(candidate + "\n")  # as written: a line break follows
        try:
            if _read_value(lines, 0, lines[0].lstrip(_BLANK)) == (value, len(lines) - 1):
                return candidate
        except ModelfileError:
            continue
    raise ModelfileError(f"{what} cannot be written in a Modelfile (its quotes clash with the line breaks): {value[:40]!r}")


# ----------------------------------------------------------------------------- parameters


def convert_parameter(name: str, raw: str) -> Any:
    """One PARAMETER value typed as Ollama's option ``name`` (a list for ``stop``)."""
    kind = OPTION_TYPES.get(name)
    if kind is None:
        if name in DEPRECATED_PARAMETERS:
            return None
        raise ModelfileError(f"unknown parameter '{name}'")
    if kind is list:
        return [raw]
    if kind is str:
        return raw
    if kind is bool and raw in _TRUE | _FALSE:
        return raw in _TRUE
    if kind is int and re.fullmatch(r"[+-]?[0-9]{1,19}", raw):
        return int(raw)
    if kind is float:
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and re.fullmatch(r"[0-9eE.+-]+", raw):
            return number
    raise ModelfileError(f"invalid {kind.__name__} value for parameter '{name}': {raw!r}")


def convert_parameters(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Typed options from PARAMETER pairs: repeated ``stop`` values collect into one list,
    other repeats keep the last value, deprecated names are dropped with a warning."""
    out: dict[str, Any] = {}
    for name, raw in pairs:
        if name in DEPRECATED_PARAMETERS:
            log.warning("parameter %s is deprecated and ignored", name)
            continue
        value = convert_parameter(name, raw)
        out[name] = out.get(name, []) + value if isinstance(value, list) else value
    return out


def parameters_to_pairs(options: dict[str, Any]) -> list[tuple[str, str]]:
    """The inverse of ``convert_parameters``, for writing stored options back as PARAMETER lines."""
    pairs: list[tuple[str, str]] = []
    for name, value in options.items():
        for item in value if isinstance(value, list) else [value]:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            pairs.append((name, text))
    return pairs


# ----------------------------------------------------------------------------- parse and format


def parse_modelfile(text: str) -> Modelfile:
    """Read a Modelfile; every problem is a ModelfileError naming its line."""
    if not isinstance(text, str):
        raise ModelfileError(f"a Modelfile must be text, not {type(text).__name__}")
    lines = _lines(text)
    found: dict[str, Any] = {"parameters": [], "messages": [], "adapters": [], "license": [], "projectors": []}
    i = 0
    while i < len(lines):
        lineno, stripped = i + 1, lines[i].lstrip(_BLANK)
        if not stripped.strip(_BLANK) or stripped.startswith("#"):
            i += 1
            continue
        word = re.match(r"[A-Za-z]*", stripped).group()
        rest = stripped[len(word) :]
        if not word or (rest and rest[0] not in _BLANK):
            token = (word + rest).split(None, 1)[0] if (word + rest).split() else stripped
            raise ModelfileError(f"unknown instruction '{token[:40]}'", lineno)
        name = word.lower()
        if name not in INSTRUCTIONS:
            raise ModelfileError(f"unknown instruction '{word}'", lineno)
        rest = rest.lstrip(_BLANK)
        key = None
        if name in ("parameter", "message"):
            m = (_PARAM_NAME if name == "parameter" else re.compile(r"[A-Za-z]+")).match(rest)
            if not m or not rest[m.end() :][:1] or rest[m.end()] not in _BLANK:
                raise ModelfileError(f"{word.upper()} needs a {'name' if name == 'parameter' else 'role'} and a value", lineno)
            key, rest = m.group(), rest[m.end() :].lstrip(_BLANK)
        if not rest.strip(_BLANK):
            raise ModelfileError(f"missing value for {word.upper()} (write \"\" for an empty one)", lineno)
        value, i = _read_value(lines, i, rest)
        _apply(found, name, key, value, lineno)
    if "from_" not in found:
        raise ModelfileError("no FROM line: a Modelfile must say which model it builds on")
    return Modelfile(**found)


def _apply(found: dict[str, Any], name: str, key: str | None, value: str, lineno: int) -> None:
    if name == "from":
        if not value:
            raise ModelfileError("FROM needs a model name or a file path", lineno)
        if "from_" not in found:
            found["from_"] = value
        elif found["projectors"]:
            raise ModelfileError("a third FROM; a Modelfile builds on one model and at most one projector", lineno)
        else:  # Ollama's way of adding a vision projector: a second FROM naming its GGUF file
            found["projectors"].append(value)
    elif name == "parameter":
        try:
            convert_parameter(key, value)
        except ModelfileError as e:
            raise ModelfileError(str(e), lineno) from None
        found["parameters"].append((key, value))
    elif name == "message":
        if key not in MESSAGE_ROLES:
            raise ModelfileError(f"message role must be one of {', '.join(MESSAGE_ROLES)}, not '{key}'", lineno)
        found["messages"].append({"role": key, "content": value})
    elif name == "requires":
        try:
            found["requires"] = normalize_requires(value)
        except ValueError:
            raise ModelfileError(f"REQUIRES must be a version such as 0.14.0, not {value!r}", lineno) from None
    elif name in ("parser", "renderer"):
        try:
            format_named(value, name.upper())
        except UnknownFormat as exc:
            raise ModelfileError(str(exc), lineno) from None
        found[name] = value
    elif name in ("adapter", "license"):
        found["adapters" if name == "adapter" else "license"].append(value)
    else:  # template, system: the last one wins, as in Ollama
        found[name] = value


def format_modelfile(mf: Modelfile) -> str:
    """The Modelfile text for ``mf``; ``parse_modelfile`` reads it back equal to ``mf``."""
    if not mf.from_:
        raise ModelfileError("FROM needs a model name or a file path")
    out = [f"FROM {_quote(mf.from_, 'FROM')}"]
    out += [f"FROM {_quote(p, 'FROM')}" for p in mf.projectors]
    out += [f"ADAPTER {_quote(a, 'ADAPTER')}" for a in mf.adapters]
    if mf.template is not None:
        out.append(f"TEMPLATE {_quote(mf.template, 'TEMPLATE')}")
    if mf.system is not None:
        out.append(f"SYSTEM {_quote(mf.system, 'SYSTEM')}")
    for name, value in mf.parameters:
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            raise ModelfileError(f"invalid parameter name {name!r}")
        convert_parameter(name, value)
        out.append(f"PARAMETER {name} {_quote(value, f'PARAMETER {name}')}")
    for m in mf.messages:
        if m.get("role") not in MESSAGE_ROLES:
            raise ModelfileError(f"message role must be one of {', '.join(MESSAGE_ROLES)}, not {m.get('role')!r}")
        out.append(f"MESSAGE {m['role']} {_quote(m.get('content') or '', 'MESSAGE')}")
    out += [f"LICENSE {_quote(text, 'LICENSE')}" for text in mf.license]
    if mf.requires is not None:
        try:
            valid = normalize_requires(mf.requires) == mf.requires
        except ValueError:
            valid = False
        if not valid:
            raise ModelfileError(f"REQUIRES must be a version such as 0.14.0, not {mf.requires!r}")
        out.append(f"REQUIRES {_quote(mf.requires, 'REQUIRES')}")
    for instruction, value in (("PARSER", mf.parser), ("RENDERER", mf.renderer)):
        if value is not None:
            out.append(f"{instruction} {_quote(value, instruction)}")
    return "\n".join(out) + "\n"
