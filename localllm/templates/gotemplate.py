"""Ollama's Go ``text/template`` dialect, parsed and rendered in Python.

Modelfile ``TEMPLATE`` instructions and Ollama's built-in templates are written
for Go's ``text/template`` with Ollama's extra functions. We have no Go runtime,
so this module implements the part of that language real templates use:

* actions ``{{ pipeline }}`` with ``{{-``/``-}}`` whitespace trimming and
  ``{{/* comments */}}``;
* fields ``.A.B``, ``.``, variables ``$``, ``$x``, ``$x.Field``, ``$.Field``,
  declarations ``$x := …`` and assignments ``$x = …`` with Go's block scoping;
* ``if``/``else if``/``else``, ``with``/``else with``, ``range`` (lists, maps in
  sorted key order, integers) with ``$i, $e :=``, ``break`` and ``continue``;
* pipelines ``a | f b``, parenthesised pipelines, string/raw/char/number
  literals, ``true``/``false``/``nil``;
* Go's functions ``and or not len index slice print printf println eq ne lt
  le gt ge html`` and Ollama's ``json``, ``currentDate``, ``yesterdayDate``.

Everything is checked when the template is parsed (unknown functions,
undefined variables, unbalanced blocks, ``break`` outside ``range``), so a bad
Modelfile fails at ``create`` time. Rendering is bounded in output size and
loop iterations because templates come from strangers; its time and memory are
bounded by the process it runs in (:mod:`localllm.templates.worker`).

Deliberate differences from Go, chosen for prompts rather than for Go
programs: a missing value prints as the empty string (Go prints
``<no value>``); a field lookup on a dict also accepts the JSON spelling of the
Go field name (``.ToolCalls`` finds ``tool_calls``, ``.Content`` finds
``content``), so API payloads can be passed as they arrive; dicts and lists
print as compact JSON, as Ollama's own tool and argument types do;
``define``/``template``/``block`` are rejected.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

MAX_OUTPUT_CHARS = 16 * 1024 * 1024
MAX_ITERATIONS = 200_000
MAX_TEMPLATE_CHARS = 1024 * 1024
MAX_NESTING = 40
_MAX_FORMAT_WIDTH = 10_000


class TemplateError(ValueError):
    """A template that cannot be parsed or rendered; the message says where."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None) -> None:
        self.detail = message
        self.line = line
        self.column = column
        where = f"line {line}, col {column}: " if line is not None else ""
        super().__init__(f"template: {where}{message}")


# ----------------------------------------------------------------------------- syntax tree


@dataclass(frozen=True)
class _Node:
    pos: int


@dataclass(frozen=True)
class _Text(_Node):
    text: str


@dataclass(frozen=True)
class _Field(_Node):
    names: tuple[str, ...]  # .A.B → ("A", "B")


@dataclass(frozen=True)
class _Dot(_Node):
    pass


@dataclass(frozen=True)
class _Var(_Node):
    name: str  # "$" or "$x"
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Literal(_Node):
    value: Any


@dataclass(frozen=True)
class _Func(_Node):
    name: str


@dataclass(frozen=True)
class _Command(_Node):
    args: tuple[_Node, ...]


@dataclass(frozen=True)
class _Pipe(_Node):
    decl: tuple[str, ...]
    is_assign: bool
    cmds: tuple[_Command, ...]


@dataclass(frozen=True)
class _SubPipe(_Node):
    """A parenthesised pipeline, optionally followed by fields: ``(index .M 0).Role``."""

    pipe: _Pipe
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Action(_Node):
    pipe: _Pipe


@dataclass(frozen=True)
class _Branch(_Node):
    kind: str  # "if" | "with" | "range"
    pipe: _Pipe
    body: tuple[_Node, ...]
    orelse: tuple[_Node, ...] = ()


@dataclass(frozen=True)
class _Break(_Node):
    pass


@dataclass(frozen=True)
class _Continue(_Node):
    pass


# ----------------------------------------------------------------------------- lexer


@dataclass(frozen=True)
class _Tok:
    kind: str  # text open close ident field var string number char lparen rparen pipe declare assign comma
    value: Any
    pos: int
    spaced: bool = False  # preceded by white space inside an action


_SPACE = " \t\r\n"
_NUMBER = re.compile(r"[+-]?(?:\d|\.\d)(?:[0-9A-Za-z_.]|(?<=[eEpP])[+-])*")
_IDENT = re.compile(r"[^\W\d]\w*")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"'}


def _position(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, column


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks: list[_Tok] = []

    def error(self, message: str, pos: int) -> TemplateError:
        line, column = _position(self.text, pos)
        return TemplateError(message, line=line, column=column)

    def run(self) -> list[_Tok]:
        text, i, trim_next = self.text, 0, False
        while True:
            j = text.find("{{", i)
            chunk = text[i:] if j < 0 else text[i:j]
            trim_left = j >= 0 and text[j + 2 : j + 3] == "-" and text[j + 3 : j + 4] in tuple(_SPACE)
            if trim_next:
                chunk = chunk.lstrip(_SPACE)
            if trim_left:
                chunk = chunk.rstrip(_SPACE)
            if chunk:
                self.toks.append(_Tok("text", chunk, i))
            if j < 0:
                return self.toks
            i, trim_next = self._action(j, j + (4 if trim_left else 2))

    def _close_at(self, i: int) -> tuple[int, bool] | None:
        """(index after the closing delimiter, trims?) if an action closes at ``i``."""
        text = self.text
        if text[i : i + 1] in tuple(_SPACE) and text.startswith("-}}", i + 1):
            return i + 4, True
        if text.startswith("}}", i):
            return i + 2, False
        return None

    def _action(self, start: int, i: int) -> tuple[int, bool]:
        text = self.text
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise self.error("unclosed comment", start)
            closed = self._close_at(end + 2)
            if closed is None:
                raise self.error("comment ends before closing delimiter", end)
            return closed
        self.toks.append(_Tok("open", None, start))
        spaced, depth = True, 0
        while True:
            closed = self._close_at(i)
            if closed is not None:
                if depth > 0:
                    raise self.error("unclosed left paren", i)
                self.toks.append(_Tok("close", None, i))
                return closed
            if i >= len(text):
                raise self.error("unclosed action", start)
            c = text[i]
            if c in _SPACE:
                i, spaced = i + 1, True
                continue
            tok, i = self._token(i, spaced)
            if tok.kind == "lparen":
                depth += 1
            elif tok.kind == "rparen":
                depth -= 1
                if depth < 0:
                    raise self.error("unexpected right paren", tok.pos)
            self.toks.append(tok)
            spaced = False

    def _token(self, i: int, spaced: bool) -> tuple[_Tok, int]:
        text, c = self.text, self.text[i]
        punct = {"(": "lparen", ")": "rparen", "|": "pipe", ",": "comma", "=": "assign"}
        if text.startswith(":=", i):
            return _Tok("declare", None, i, spaced), i + 2
        if c in punct:
            return _Tok(punct[c], None, i, spaced), i + 1
        if c == '"':
            return self._quoted(i, spaced)
        if c == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise self.error("unterminated raw quoted string", i)
            return _Tok("string", text[i + 1 : end], i, spaced), end + 1
        if c == "'":
            return self._char(i, spaced)
        number = _NUMBER.match(text, i)
        if number:
            return _Tok("number", self._number(number.group(), i), i, spaced), number.end()
        if c == "$":
            name = _IDENT.match(text, i + 1)
            end = name.end() if name else i + 1
            return _Tok("var", text[i:end], i, spaced), end
        if c == ".":
            name = _IDENT.match(text, i + 1)
            if name:
                return _Tok("field", name.group(), i, spaced), name.end()
            return _Tok("dot", None, i, spaced), i + 1
        name = _IDENT.match(text, i)
        if name:
            return _Tok("ident", name.group(), i, spaced), name.end()
        raise self.error(f"unrecognized character in action: {c!r}", i)

    def _quoted(self, i: int, spaced: bool) -> tuple[_Tok, int]:
        text, out, j = self.text, [], i + 1
        while True:
            if j >= len(text) or text[j] == "\n":
                raise self.error("unterminated quoted string", i)
            c = text[j]
            if c == '"':
                return _Tok("string", "".join(out), i, spaced), j + 1
            if c == "\\":
                ch, j = self._escape(j, '"')
                out.append(ch)
            else:
                out.append(c)
                j += 1

    def _char(self, i: int, spaced: bool) -> tuple[_Tok, int]:
        text = self.text
        if text[i + 1 : i + 2] == "\\":
            ch, j = self._escape(i + 1, "'")
        elif i + 1 < len(text) and text[i + 1] not in "'\n":
            ch, j = text[i + 1], i + 2
        else:
            raise self.error("malformed character constant", i)
        if text[j : j + 1] != "'":
            raise self.error("unterminated character constant", i)
        return _Tok("char", ord(ch), i, spaced), j + 1

    def _escape(self, j: int, quote: str) -> tuple[str, int]:
        """Decode the Go escape sequence starting at the backslash ``text[j]``."""
        text = self.text
        c = text[j + 1 : j + 2]
        if c in _ESCAPES and (c not in "'\"" or c == quote):
            return _ESCAPES[c], j + 2
        sizes = {"x": (2, 16), "u": (4, 16), "U": (8, 16)}
        if c in sizes:
            size, base = sizes[c]
            digits, start = text[j + 2 : j + 2 + size], j + 2
        elif c and c in "01234567":
            size, base, digits, start = 3, 8, text[j + 1 : j + 4], j + 1
        else:
            raise self.error("unknown escape sequence", j)
        try:
            if len(digits) != size:
                raise ValueError(digits)
            return chr(int(digits, base)), start + size
        except (ValueError, OverflowError):
            raise self.error("invalid escape sequence", j) from None

    def _number(self, s: str, pos: int) -> int | float:
        body = s.lstrip("+-")
        if re.fullmatch(r"0[0-7_]+", body):
            s = s.replace(body, "0o" + body[1:], 1)
        try:
            return int(s, 0)
        except ValueError:
            pass
        try:
            if re.search(r"[^0-9eE.+_-]", s):  # hex floats, imaginaries, junk
                raise ValueError(s)
            return float(s)
        except ValueError:
            raise self.error(f"bad number syntax: {s!r}", pos) from None


# ----------------------------------------------------------------------------- parser

_KEYWORDS = frozenset({"if", "else", "end", "range", "with", "break", "continue", "define", "template", "block"})


class _Parser:
    def __init__(self, text: str, toks: list[_Tok]) -> None:
        self.text = text
        self.toks = toks
        self.i = 0
        self.vars: list[str] = ["$"]
        self.depth = 0
        self.range_depth = 0

    def error(self, message: str, pos: int) -> TemplateError:
        line, column = _position(self.text, pos)
        return TemplateError(message, line=line, column=column)

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end of template", len(self.text))
        self.i += 1
        return tok

    def expect(self, kind: str, context: str) -> _Tok:
        tok = self.next()
        if tok.kind != kind:
            raise self.error(f"unexpected {self._describe(tok)} in {context}", tok.pos)
        return tok

    @staticmethod
    def _describe(tok: _Tok) -> str:
        if tok.kind == "close":
            return '"}}"'
        if tok.value is None:
            return tok.kind
        return f"{tok.kind} {tok.value!r}"

    def parse(self) -> tuple[_Node, ...]:
        nodes, stop = self.parse_list()
        if stop is not None:
            raise self.error(f"unexpected {{{{{stop.value}}}}}", stop.pos)
        return nodes

    def parse_list(self) -> tuple[tuple[_Node, ...], _Tok | None]:
        """Nodes up to an ``{{end}}``/``{{else}}`` (returned, its ident token consumed) or the end."""
        nodes: list[_Node] = []
        while (tok := self.peek()) is not None:
            self.i += 1
            if tok.kind == "text":
                nodes.append(_Text(tok.pos, tok.value))
                continue
            first = self.peek()
            if first is not None and first.kind == "ident" and first.value in _KEYWORDS:
                self.i += 1
                if first.value in ("end", "else"):
                    return tuple(nodes), first
                nodes.append(self.parse_keyword(first))
            else:
                nodes.append(_Action(tok.pos, self.parse_pipe("command", decl_ok=True)))
        return tuple(nodes), None

    def parse_keyword(self, tok: _Tok) -> _Node:
        if tok.value in ("if", "with", "range"):
            return self.parse_branch(tok)
        if tok.value in ("break", "continue"):
            if self.range_depth == 0:
                raise self.error(f"{{{{{tok.value}}}}} outside {{{{range}}}}", tok.pos)
            self.expect("close", tok.value)
            return _Break(tok.pos) if tok.value == "break" else _Continue(tok.pos)
        raise self.error(f"{{{{{tok.value}}}}} is not supported in model templates", tok.pos)

    def parse_branch(self, tok: _Tok) -> _Branch:
        kind = tok.value
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"blocks nested deeper than {MAX_NESTING}", tok.pos)
        mark = len(self.vars)
        pipe = self.parse_pipe(kind, decl_ok=True, range_decl=kind == "range")
        body_mark = len(self.vars)
        if kind == "range":
            self.range_depth += 1
        body, stop = self.parse_list()
        if kind == "range":
            self.range_depth -= 1
        del self.vars[body_mark:]  # what the body declared is gone in the else branch
        orelse: tuple[_Node, ...] = ()
        if stop is None:
            raise self.error(f"unexpected end of template: {{{{{kind}}}}} has no {{{{end}}}}", tok.pos)
        if stop.value == "else":
            chained = self.peek()
            if kind != "range" and chained is not None and chained.kind == "ident" and chained.value == kind:
                self.i += 1
                orelse = (self.parse_branch(chained),)  # shares our {{end}}
            else:
                self.expect("close", "else")
                orelse, stop = self.parse_list()
                if stop is None or stop.value != "end":
                    where = stop.pos if stop is not None else tok.pos
                    raise self.error(f"expected {{{{end}}}} to close {{{{{kind}}}}}", where)
                self.expect("close", "end")
        else:
            self.expect("close", "end")
        del self.vars[mark:]
        self.depth -= 1
        return _Branch(tok.pos, kind, pipe, body, orelse)

    def parse_pipe(self, context: str, *, decl_ok: bool = False, range_decl: bool = False, end: str = "close") -> _Pipe:
        start = self.peek()
        pos = start.pos if start else len(self.text)
        decl: list[str] = []
        is_assign = False
        if decl_ok and self._at_declaration():
            decl.append(self.next().value)
            if self.peek() is not None and self.peek().kind == "comma":
                if not range_decl:
                    raise self.error("too many declarations in " + context, self.next().pos)
                self.i += 1
                second = self.expect("var", "range declaration")
                decl.append(second.value)
            op = self.next()
            if op.kind not in ("declare", "assign"):
                raise self.error(f"unexpected {self._describe(op)} in {context}", op.pos)
            is_assign = op.kind == "assign"
            for name in decl:
                if name == "$":
                    raise self.error("cannot declare or assign $", pos)
                if is_assign and name not in self.vars:
                    raise self.error(f"undefined variable {name!r}", pos)
        cmds: list[_Command] = []
        while True:
            cmds.append(self.parse_command(context, stage=len(cmds)))
            tok = self.next()
            if tok.kind == end:
                break
            if tok.kind != "pipe":
                raise self.error(f"unexpected {self._describe(tok)} in {context}", tok.pos)
        if not is_assign:
            self.vars.extend(decl)
        return _Pipe(pos, tuple(decl), is_assign, tuple(cmds))

    def _at_declaration(self) -> bool:
        toks = self.toks[self.i : self.i + 4]
        if not toks or toks[0].kind != "var":
            return False
        if len(toks) > 1 and toks[1].kind in ("declare", "assign"):
            return True
        return len(toks) > 3 and toks[1].kind == "comma" and toks[2].kind == "var" and toks[3].kind in ("declare", "assign")

    def parse_command(self, context: str, stage: int) -> _Command:
        args: list[_Node] = []
        while (tok := self.peek()) is not None and tok.kind not in ("close", "rparen", "pipe"):
            if args and not tok.spaced and tok.kind != "lparen":
                raise self.error(f"missing space before {self._describe(tok)}", tok.pos)
            args.append(self.parse_operand(context))
        where = tok.pos if tok is not None else len(self.text)
        if not args:
            raise self.error(f"missing value for {context}", where)
        if stage > 0 and not isinstance(args[0], _Func):
            raise self.error(f"non executable command in pipeline stage {stage + 1}", args[0].pos)
        return _Command(args[0].pos, tuple(args))

    def parse_operand(self, context: str) -> _Node:
        tok = self.next()
        if tok.kind == "field":
            return _Field(tok.pos, (tok.value, *self._chain()))
        if tok.kind == "var":
            if tok.value not in self.vars:
                raise self.error(f"undefined variable {tok.value!r}", tok.pos)
            return _Var(tok.pos, tok.value, self._chain())
        if tok.kind == "dot":
            return _Dot(tok.pos)
        if tok.kind in ("string", "number", "char"):
            return _Literal(tok.pos, tok.value)
        if tok.kind == "lparen":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.error(f"parentheses nested deeper than {MAX_NESTING}", tok.pos)
            pipe = self.parse_pipe("parenthesized pipeline", end="rparen")
            self.depth -= 1
            return _SubPipe(tok.pos, pipe, self._chain())
        if tok.kind == "ident":
            literals = {"true": True, "false": False, "nil": None}
            if tok.value in literals:
                return _Literal(tok.pos, literals[tok.value])
            if tok.value in _KEYWORDS:
                raise self.error(f"unexpected {{{{{tok.value}}}}} in {context}", tok.pos)
            if tok.value not in _BUILTINS:
                raise self.error(f"function {tok.value!r} not defined", tok.pos)
            return _Func(tok.pos, tok.value)
        raise self.error(f"unexpected {self._describe(tok)} in {context}", tok.pos)

    def _chain(self) -> tuple[str, ...]:
        names: list[str] = []
        while (tok := self.peek()) is not None and tok.kind == "field" and not tok.spaced:
            names.append(self.next().value)
        return tuple(names)


# ----------------------------------------------------------------------------- values


def go_json(value: Any) -> str:
    """``json.Marshal`` as Go writes it: compact, ``<>&`` escaped, integral floats without ``.0``."""
    return "".join(_json_parts(value, 0))


def _json_parts(value: Any, depth: int):
    if depth > 100:
        raise ValueError("value nested too deeply for json")
    if value is None:
        yield "null"
    elif isinstance(value, bool):
        yield "true" if value else "false"
    elif isinstance(value, int):
        yield str(value)
    elif isinstance(value, float):
        yield _json_float(value)
    elif isinstance(value, str):
        s = json.dumps(value, ensure_ascii=False)
        for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
            s = s.replace(raw, escaped)
        yield s.encode("utf-8", "replace").decode("utf-8")
    elif isinstance(value, dict):
        yield "{"
        for n, (k, v) in enumerate(value.items()):
            yield ("," if n else "") + go_json(str(k)) + ":"
            yield from _json_parts(v, depth + 1)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        for n, v in enumerate(value):
            if n:
                yield ","
            yield from _json_parts(v, depth + 1)
        yield "]"
    else:
        yield go_json(str(value))


def _float_digits(f: float) -> tuple[str, str, int]:
    """(sign, shortest round-trip digits, decimal exponent of the first digit)."""
    sign, digits, exp = Decimal(repr(f)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    return ("-" if sign else ""), text, len(digits) - 1 + exp


def _plain_float(f: float, sci_below: int, sci_from: int, min_exp_digits: int) -> str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign, s, x = _float_digits(f)
    if x < sci_below or x >= sci_from:
        mantissa = s[0] + ("." + s[1:] if len(s) > 1 else "")
        return f"{sign}{mantissa}e{'-' if x < 0 else '+'}{abs(x):0{min_exp_digits}d}"
    if x >= len(s) - 1:
        return sign + s + "0" * (x - len(s) + 1)
    if x >= 0:
        return f"{sign}{s[: x + 1]}.{s[x + 1 :]}"
    return f"{sign}0.{'0' * (-x - 1)}{s}"


def _go_float(f: float) -> str:
    """Go's ``%v`` for float64 (shortest digits, exponent when < 1e-4 or >= 1e21)."""
    return _plain_float(f, -4, 21, 2)


def _json_float(f: float) -> str:
    if not math.isfinite(f):
        raise ValueError(f"json: unsupported value {f}")
    return _plain_float(f, -6, 21, 1)


def _go_str(value: Any) -> str:
    """How an action prints a value."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    return go_json(value)


def _go_type(value: Any) -> str:
    names = {bool: "bool", int: "int", float: "float64", str: "string", dict: "map[string]interface {}"}
    if value is None:
        return "<nil>"
    if isinstance(value, (list, tuple)):
        return "[]interface {}"
    return names.get(type(value), type(value).__name__)


def _truth(value: Any) -> bool:
    """Go's truth: false, 0, nil and empty strings, lists and maps are false."""
    if value is None:
        return False
    if isinstance(value, (str, list, tuple, dict)):
        return len(value) > 0
    if isinstance(value, (bool, int, float)):
        return value != 0
    return True


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _field(value: Any, name: str, pos: int) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        for key in (name, name[:1].lower() + name[1:], _snake(name)):
            if key in value:
                return value[key]
        return None
    raise _RenderError(f"can't evaluate field {name} in type {_go_type(value)}", pos)


# ----------------------------------------------------------------------------- functions


class _RenderError(Exception):
    """Raised during rendering; turned into a TemplateError with line and column."""

    def __init__(self, message: str, pos: int | None = None) -> None:
        super().__init__(message)
        self.pos = pos


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _comparable(a: Any, b: Any) -> bool:
    return (_is_number(a) and _is_number(b)) or (type(a) is type(b) and isinstance(a, (str, bool)))


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise _RenderError("missing argument for comparison")
    for b in others:
        if isinstance(a, (list, tuple, dict)) or isinstance(b, (list, tuple, dict)):
            raise _RenderError(f"non-comparable types {_go_type(a)} and {_go_type(b)}")
        if a is None or b is None:
            if a is b:
                return True
        elif not _comparable(a, b):
            raise _RenderError(f"incompatible types for comparison: {_go_type(a)} and {_go_type(b)}")
        elif a == b:
            return True
    return False


def _ordered(op: str):
    def compare(a: Any, b: Any) -> bool:
        if not (_comparable(a, b) and not isinstance(a, bool)):
            raise _RenderError(f"incompatible types for comparison: {_go_type(a)} and {_go_type(b)}")
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]

    return compare


def _len(v: Any) -> int:
    if isinstance(v, str):
        return len(v.encode("utf-8", "replace"))  # Go counts bytes
    if isinstance(v, (list, tuple, dict)):
        return len(v)
    raise _RenderError(f"len of type {_go_type(v)}")


def _int_arg(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _RenderError(f"cannot index slice/array with type {_go_type(v)}" if what == "index" else f"{what} must be an integer")
    return v


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(item, dict):
            item = item.get(key)
        elif isinstance(item, (list, tuple, str)):
            seq = item.encode("utf-8", "replace") if isinstance(item, str) else item
            k = _int_arg(key, "index")
            if not 0 <= k < len(seq):
                raise _RenderError(f"index out of range: {k}")
            item = seq[k]
        elif item is None:
            raise _RenderError("index of untyped nil")
        else:
            raise _RenderError(f"can't index item of type {_go_type(item)}")
    return item


def _slice(item: Any, *bounds: Any) -> Any:
    if not isinstance(item, (list, tuple, str)):
        raise _RenderError(f"can't slice item of type {_go_type(item)}")
    seq = item.encode("utf-8", "replace") if isinstance(item, str) else item
    if len(bounds) > 3 or (isinstance(item, str) and len(bounds) > 2):
        raise _RenderError("too many slice indexes")
    idx = [_int_arg(b, "slice index") for b in bounds]
    lo = idx[0] if idx else 0
    hi = idx[1] if len(idx) > 1 else len(seq)
    if not 0 <= lo <= hi <= len(seq):
        raise _RenderError(f"slice index out of range: [{lo}:{hi}] with length {len(seq)}")
    out = seq[lo:hi]
    return out.decode("utf-8", "replace") if isinstance(out, bytes) else list(out)


def _sprint(*args: Any) -> str:
    """Go's fmt.Sprint: a space between operands when neither is a string."""
    out: list[str] = []
    for i, a in enumerate(args):
        if i and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(_go_str(a))
    return "".join(out)


def _sprintln(*args: Any) -> str:
    return " ".join(_go_str(a) for a in args) + "\n"


_VERB = re.compile(r"%([-+# 0]*)(\d*)(?:\.(\d*))?([a-zA-Z%]?)")


def _sprintf(fmt: Any, *args: Any) -> str:
    """Go's fmt.Sprintf for the verbs templates use (v s q d f e g t x X c %)."""
    if not isinstance(fmt, str):
        raise _RenderError(f"printf format must be a string, not {_go_type(fmt)}")
    out: list[str] = []
    used, pos = 0, 0
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, verb = m.groups()
        if not verb:
            out.append("%!(NOVERB)")
        elif verb == "%":
            out.append("%")
        elif used >= len(args):
            out.append(f"%!{verb}(MISSING)")
        else:
            out.append(_format_one(flags, width, prec, verb, args[used]))
            used += 1
    out.append(fmt[pos:])
    if used < len(args):
        out.append("%!(EXTRA " + ", ".join(f"{_go_type(a)}={_go_str(a)}" for a in args[used:]) + ")")
    return "".join(out)


def _format_one(flags: str, width: str, prec: str | None, verb: str, arg: Any) -> str:
    w = int(width) if width else 0
    p = int(prec) if prec else (0 if prec == "" else None)
    if w > _MAX_FORMAT_WIDTH or (p or 0) > _MAX_FORMAT_WIDTH:
        raise _RenderError(f"printf width or precision above {_MAX_FORMAT_WIDTH}")
    number = _is_number(arg)
    if verb == "v" or (verb == "s" and not number and not isinstance(arg, bool)):
        s = _go_str(arg)
        s = s[:p] if p is not None and verb == "s" else s
    elif verb == "q" and isinstance(arg, str):
        s = json.dumps(arg, ensure_ascii=False)
    elif verb == "t" and isinstance(arg, bool):
        s = "true" if arg else "false"
    elif verb == "d" and number and isinstance(arg, int):
        s = f"{arg:+d}" if "+" in flags else str(arg)
    elif verb in "xX" and (isinstance(arg, str) or (number and isinstance(arg, int))):
        s = arg.encode("utf-8").hex() if isinstance(arg, str) else format(arg, "x")
        s = s.upper() if verb == "X" else s
    elif verb == "c" and number and isinstance(arg, int) and 0 <= arg <= 0x10FFFF:
        s = chr(arg)
    elif verb in "feEgG" and number:
        f = float(arg)
        if verb in "gG" and p is None:
            s = _go_float(f)
        else:
            s = format(f, ("+" if "+" in flags else "") + f".{6 if p is None else p}{verb}")
    else:
        return f"%!{verb}({_go_type(arg)}={_go_str(arg)})"
    if len(s) < w:
        if "-" in flags:
            s = s.ljust(w)
        elif "0" in flags and number:
            sign = s[0] if s[:1] in "+-" else ""
            s = sign + s[len(sign) :].rjust(w - len(sign), "0")
        else:
            s = s.rjust(w)
    return s


def _html(*args: Any) -> str:
    s = _sprint(*args)
    for raw, escaped in (("&", "&amp;"), ("'", "&#39;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&#34;"), ("\0", "\ufffd")):
        s = s.replace(raw, escaped)
    return s


def _date(days_ago: int):
    def date(*_format: Any) -> str:
        return (_dt.date.today() - _dt.timedelta(days=days_ago)).isoformat()

    return date


def _arity(fn, low: int, high: int | None = None):
    high = low if high is None else high

    def checked(*args: Any) -> Any:
        if not low <= len(args) <= (high if high >= 0 else len(args)):
            raise _RenderError(f"wrong number of args: want {low if low == high else f'at least {low}'} got {len(args)}")
        return fn(*args)

    return checked


_FUNCS = {
    "not": _arity(lambda v: not _truth(v), 1),
    "len": _arity(_len, 1),
    "index": _arity(_index, 1, -1),
    "slice": _arity(_slice, 1, -1),
    "print": _sprint,
    "printf": _arity(_sprintf, 1, -1),
    "println": _sprintln,
    "eq": _arity(_eq, 1, -1),
    "ne": _arity(lambda a, b: not _eq(a, b), 2),
    "lt": _arity(_ordered("lt"), 2),
    "le": _arity(_ordered("le"), 2),
    "gt": _arity(_ordered("gt"), 2),
    "ge": _arity(_ordered("ge"), 2),
    "html": _html,
    "json": _arity(go_json, 1),
    "currentDate": _date(0),
    "yesterdayDate": _date(1),
}
_BUILTINS = frozenset(_FUNCS) | {"and", "or"}


# ----------------------------------------------------------------------------- execution


class _BreakSignal(Exception):
    pass


class _ContinueSignal(Exception):
    pass


class _Missing:
    """No value piped into a command (distinct from a piped nil)."""


_NO_FINAL = _Missing()


class _Exec:
    def __init__(self, data: Any, max_output: int, max_iterations: int) -> None:
        self.vars: list[list[Any]] = [["$", data]]
        self.out: list[str] = []
        self.size = 0
        self.max_output = max_output
        self.iterations = max_iterations

    def write(self, s: str, pos: int) -> None:
        self.size += len(s)
        if self.size > self.max_output:
            raise _RenderError(f"output larger than {self.max_output} characters", pos)
        self.out.append(s)

    def tick(self, pos: int) -> None:
        self.iterations -= 1
        if self.iterations < 0:
            raise _RenderError("too many loop iterations", pos)

    def walk(self, nodes: tuple[_Node, ...], dot: Any) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                self.write(node.text, node.pos)
            elif isinstance(node, _Action):
                value = self.pipe(node.pipe, dot)
                if not node.pipe.decl:
                    self.write(_go_str(value), node.pos)
            elif isinstance(node, _Branch):
                self.branch(node, dot)
            elif isinstance(node, _Break):
                raise _BreakSignal
            elif isinstance(node, _Continue):
                raise _ContinueSignal

    def branch(self, node: _Branch, dot: Any) -> None:
        mark = len(self.vars)
        try:
            value = self.pipe(node.pipe, dot)
            if node.kind == "range":
                self.range(node, value, dot)
            elif _truth(value):
                self.walk(node.body, value if node.kind == "with" else dot)
            else:
                self.walk(node.orelse, dot)
        finally:
            del self.vars[mark:]

    def range(self, node: _Branch, value: Any, dot: Any) -> None:
        if value is None:
            items: list[tuple[Any, Any]] = []
        elif isinstance(value, (list, tuple)):
            items = list(enumerate(value))
        elif isinstance(value, dict):
            items = [(k, value[k]) for k in sorted(value, key=lambda k: (str(type(k)), k if isinstance(k, (int, float, str)) else str(k)))]
        elif isinstance(value, int) and not isinstance(value, bool):
            if value > self.iterations:
                raise _RenderError("too many loop iterations", node.pos)
            items = [(i, i) for i in range(value)]
        else:
            raise _RenderError(f"range can't iterate over {_go_str(value)!r}", node.pos)
        if not items:
            self.walk(node.orelse, dot)
            return
        decl = node.pipe.decl
        for key, elem in items:
            self.tick(node.pos)
            if len(decl) == 2:
                self.set_var(decl[0], key)
                self.set_var(decl[1], elem)
            elif decl:
                self.set_var(decl[0], elem)
            mark = len(self.vars)
            try:
                self.walk(node.body, elem)
            except _BreakSignal:
                break
            except _ContinueSignal:
                continue
            finally:
                del self.vars[mark:]

    def set_var(self, name: str, value: Any) -> None:
        for slot in reversed(self.vars):
            if slot[0] == name:
                slot[1] = value
                return
        raise _RenderError(f"undefined variable {name!r}")

    def get_var(self, name: str, pos: int) -> Any:
        for slot in reversed(self.vars):
            if slot[0] == name:
                return slot[1]
        raise _RenderError(f"undefined variable {name!r}", pos)

    def pipe(self, pipe: _Pipe, dot: Any) -> Any:
        value: Any = _NO_FINAL
        for cmd in pipe.cmds:
            value = self.command(cmd, dot, value)
        for name in pipe.decl:
            if pipe.is_assign:
                self.set_var(name, value)
            else:
                self.vars.append([name, value])
        return value

    def command(self, cmd: _Command, dot: Any, final: Any) -> Any:
        first = cmd.args[0]
        try:
            if isinstance(first, _Func):
                return self.call(first.name, cmd.args[1:], dot, final)
            if len(cmd.args) > 1 or final is not _NO_FINAL:
                raise _RenderError("can't give argument to non-function", first.pos)
            return self.arg(first, dot)
        except _RenderError as e:
            if e.pos is None:
                e.pos = first.pos
            raise
        except (TypeError, ValueError, OverflowError, IndexError, KeyError) as e:
            raise _RenderError(f"error calling {getattr(first, 'name', 'command')}: {e}", first.pos) from None

    def call(self, name: str, arg_nodes: tuple[_Node, ...], dot: Any, final: Any) -> Any:
        if name in ("and", "or"):
            if len(arg_nodes) + (final is not _NO_FINAL) < 1:
                raise _RenderError(f"wrong number of args for {name}: want at least 1 got 0")
            value: Any = None
            for node in arg_nodes:
                value = self.arg(node, dot)
                if _truth(value) == (name == "or"):
                    return value
            return final if final is not _NO_FINAL else value
        args = [self.arg(node, dot) for node in arg_nodes]
        if final is not _NO_FINAL:
            args.append(final)
        if sum(len(a) for a in args if isinstance(a, str)) > self.max_output:
            raise _RenderError(f"arguments of {name} larger than {self.max_output} characters")
        result = _FUNCS[name](*args)
        if isinstance(result, str) and len(result) > self.max_output:
            raise _RenderError(f"{name} result larger than {self.max_output} characters")
        return result

    def arg(self, node: _Node, dot: Any) -> Any:
        if isinstance(node, _Literal):
            return node.value
        if isinstance(node, _Dot):
            return dot
        if isinstance(node, _Field):
            return self.fields(dot, node.names, node.pos)
        if isinstance(node, _Var):
            return self.fields(self.get_var(node.name, node.pos), node.names, node.pos)
        if isinstance(node, _SubPipe):
            return self.fields(self.pipe(node.pipe, dot), node.names, node.pos)
        if isinstance(node, _Func):
            return self.call(node.name, (), dot, _NO_FINAL)
        raise _RenderError("unexpected node", node.pos)  # unreachable for parsed trees

    @staticmethod
    def fields(value: Any, names: tuple[str, ...], pos: int) -> Any:
        for name in names:
            value = _field(value, name, pos)
        return value


# ----------------------------------------------------------------------------- public API


@dataclass(frozen=True)
class GoTemplate:
    """A parsed template; render it as often as needed."""

    source: str
    nodes: tuple[_Node, ...] = field(repr=False)

    def render(
        self,
        data: dict[str, Any],
        *,
        max_output: int = MAX_OUTPUT_CHARS,
        max_iterations: int = MAX_ITERATIONS,
    ) -> str:
        """Execute the template with ``data`` as dot; raises TemplateError on any failure."""
        run = _Exec(data, max_output, max_iterations)
        try:
            run.walk(self.nodes, data)
        except _RenderError as e:
            line, column = _position(self.source, e.pos) if e.pos is not None else (None, None)
            raise TemplateError(str(e), line=line, column=column) from None
        except RecursionError:
            raise TemplateError("value nested too deeply") from None
        return "".join(run.out)

    def identifiers(self) -> set[str]:
        """Lower-cased field and variable names the template mentions (Ollama's ``Vars``)."""
        found: set[str] = set()

        def visit(node: Any) -> None:
            if isinstance(node, _Field):
                found.update(n.lower() for n in node.names)
            elif isinstance(node, _Var):
                found.update(n.lower() for n in (node.name, *node.names))
            elif isinstance(node, _SubPipe):
                found.update(n.lower() for n in node.names)
                visit(node.pipe)
            elif isinstance(node, _Pipe):
                for cmd in node.cmds:
                    for a in cmd.args:
                        visit(a)
            elif isinstance(node, _Action):
                visit(node.pipe)
            elif isinstance(node, _Branch):
                for child in (node.pipe, *node.body, *node.orelse):
                    visit(child)

        for node in self.nodes:
            visit(node)
        return found

    def thinking_tags(self) -> tuple[str, str]:
        """The text around ``.Thinking`` in the range over ``.Messages`` (Ollama's ``thinking.InferTags``).

        For each ``.Thinking`` field whose nearest enclosing ``range`` iterates
        ``.Messages``, the node list holding it gives the tags: its first node,
        if text, is the opening tag, its last, if text, the closing one (both
        stripped; later finds win). ``("", "")`` when nothing is found.
        """
        tags = ["", ""]

        def uses_messages(pipe: _Pipe) -> bool:
            return any(isinstance(a, _Field) and a.names[0] == "Messages" for cmd in pipe.cmds for a in cmd.args)

        def visit(node: Any, siblings: tuple[_Node, ...], ranges: tuple[_Branch, ...]) -> None:
            if isinstance(node, _Field):
                if node.names[0] == "Thinking" and ranges and uses_messages(ranges[-1].pipe):
                    if isinstance(siblings[0], _Text):
                        tags[0] = siblings[0].text.strip()
                    if isinstance(siblings[-1], _Text):
                        tags[1] = siblings[-1].text.strip()
            elif isinstance(node, (_Action, _SubPipe)):
                visit(node.pipe, siblings, ranges)
            elif isinstance(node, _Pipe):
                for cmd in node.cmds:
                    for a in cmd.args:
                        visit(a, siblings, ranges)
            elif isinstance(node, _Branch):
                inner = (*ranges, node) if node.kind == "range" else ranges
                visit(node.pipe, siblings, inner)
                for nodes in (node.body, node.orelse):
                    for child in nodes:
                        visit(child, nodes, inner)

        for node in self.nodes:
            visit(node, self.nodes, ())
        return tags[0], tags[1]

    def cut_after_field(self, name: str) -> GoTemplate:
        """The template up to and including the first ``.name`` reference; everything after is dropped.

        Ollama renders the last, still open turn of a legacy (per-turn) template
        this way: the text after ``{{ .Response }}`` would close a turn the model
        has yet to write.
        """
        cut = False

        def in_list(nodes: tuple[_Node, ...]) -> tuple[_Node, ...]:
            kept = []
            for node in nodes:
                if cut:
                    break
                node = in_node(node)
                if node is not None:
                    kept.append(node)
            return tuple(kept)

        def in_pipe(pipe: _Pipe) -> _Pipe | None:
            nonlocal cut
            cmds = []
            for cmd in pipe.cmds:
                args = []
                for a in cmd.args:
                    if cut:
                        break
                    if isinstance(a, _SubPipe):
                        sub = in_pipe(a.pipe)
                        if sub is not None:
                            args.append(replace(a, pipe=sub))
                        continue
                    if isinstance(a, _Field) and name in a.names:
                        cut = True
                    args.append(a)
                if not args:
                    return None
                cmds.append(replace(cmd, args=tuple(args)))
            return replace(pipe, cmds=tuple(cmds)) if cmds else None

        def in_node(node: _Node) -> _Node | None:
            if isinstance(node, _Action):
                pipe = in_pipe(node.pipe)
                return replace(node, pipe=pipe) if pipe is not None else None
            if isinstance(node, _Branch):
                body = in_list(node.body)
                orelse = in_list(node.orelse) if not cut else ()
                return replace(node, body=body, orelse=orelse)
            return node

        return GoTemplate(self.source, in_list(self.nodes))


def parse_template(text: str) -> GoTemplate:
    """Parse ``text``; every syntax problem is a TemplateError naming line and column."""
    if not isinstance(text, str):
        raise TemplateError(f"template must be a string, not {type(text).__name__}")
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"template longer than {MAX_TEMPLATE_CHARS} characters")
    toks = _Lexer(text).run()
    return GoTemplate(text, _Parser(text, toks).parse())
