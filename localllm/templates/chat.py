"""GGUF ``tokenizer.chat_template`` (Hugging Face Jinja) rendered in a sandbox.

The template is code that came with a model file from a stranger, so it runs
in Jinja's ``ImmutableSandboxedEnvironment`` (no underscore attributes, no
Python internals, no mutation of our data) with size bounds on top of it,
because the sandbox alone does not stop ``'x' * 10**10``:

* size: string/list repetition, ``+``, ``~``, ``%``, block ``set``, macro
  output and every filter or call result are checked against the output
  limit, and integer arguments larger than it are refused before the call;
* output: the rendered stream is cut off at the limit.

Time and memory are not bounded here: no check inside the process can stop a
loop that makes no calls or one long C-level operation. They are bounded by
the worker process every render of a model's template runs in
(:mod:`localllm.templates.worker`), which is killed at the time limit and
whose address space is limited.

The variables and helpers match what Hugging Face's ``apply_chat_template``
provides (``messages``, ``tools``, ``add_generation_prompt``, ``bos_token``,
``eos_token``, ``raise_exception``, ``strftime_now``, a ``tojson`` that keeps
non-ASCII text and supports ``indent``, loop controls, ``{% generation %}``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localllm.templates.gotemplate import TemplateError

MAX_OUTPUT_CHARS = 8 * 1024 * 1024
MAX_SOURCE_CHARS = 1024 * 1024
_WIDE_FORMAT = re.compile(r"%[-+# 0]*(\d{7,}|\*)|\{[^{}]*:[^{}]*\d{7,}[^{}]*\}")


class _TooLarge(Exception):
    pass


class _GenerationTag(Extension):
    """``{% generation %}…{% endgeneration %}`` (HF marks assistant spans with it); renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _BoundedCodeGenerator(CodeGenerator):
    """Routes ``a ~ b`` through the environment so its size can be checked."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return _dt.datetime.now().strftime(fmt)


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, max_chars: int) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationTag])
        self.max_chars = max_chars
        self.concat = self.bounded_concat  # block set, macro bodies
        self.filters["tojson"] = _tojson
        self.filters = {name: self._guarded(f) for name, f in self.filters.items()}
        self.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)

    def _check(self, value: Any) -> Any:
        if isinstance(value, (str, list, tuple)) and len(value) > self.max_chars:
            raise _TooLarge(f"a value larger than {self.max_chars} characters")
        return value

    def _check_args(self, args: tuple, kwargs: dict) -> None:
        for a in (*args, *kwargs.values()):
            if isinstance(a, int) and not isinstance(a, bool) and abs(a) > self.max_chars:
                raise _TooLarge(f"an argument larger than {self.max_chars}")

    def _guarded(self, fn: Any) -> Any:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self._check_args(args, kwargs)
            return self._check(fn(*args, **kwargs))

        return guarded

    def bounded_concat(self, parts: Any) -> str:
        parts = [p if isinstance(p, str) else str(p) for p in parts]
        if sum(map(len, parts)) > self.max_chars:
            raise _TooLarge(f"a string larger than {self.max_chars} characters")
        return "".join(parts)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        sized = (str, list, tuple)
        if operator == "*":
            seq, times = (left, right) if isinstance(left, sized) else (right, left)
            if isinstance(seq, sized) and isinstance(times, int) and len(seq) * times > self.max_chars:
                raise _TooLarge(f"a repetition larger than {self.max_chars}")
        elif operator == "**":
            if isinstance(right, (int, float)) and abs(right) > 1000 and isinstance(left, (int, float)) and abs(left) > 1:
                raise _TooLarge("an exponent that large")
        elif operator == "+":
            if isinstance(left, sized) and isinstance(right, sized) and len(left) + len(right) > self.max_chars:
                raise _TooLarge(f"a value larger than {self.max_chars}")
        elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
            raise _TooLarge("a format width that large")
        return self._check(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja's signature)
        __self._check_args(args, kwargs)
        bound_to = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # the sandbox wraps str.format
        if isinstance(bound_to, str) and _WIDE_FORMAT.search(bound_to):
            raise _TooLarge("a format width that large")
        return __self._check(super().call(__context, __obj, *args, **kwargs))


class ChatTemplate:
    """A compiled chat template; ``render`` it once per request."""

    def __init__(
        self,
        source: str,
        bos_token: str = "",
        eos_token: str = "",
        *,
        name: str = "tokenizer.chat_template",
        max_output: int = MAX_OUTPUT_CHARS,
    ) -> None:
        self.name = name
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.max_output = max_output
        if not isinstance(source, str):
            raise TemplateError(f"{name}: must be a string, not {type(source).__name__}")
        if len(source) > MAX_SOURCE_CHARS:
            raise TemplateError(f"{name}: longer than {MAX_SOURCE_CHARS} characters")
        self._env = _BoundedEnvironment(max_output)
        try:
            self._template = self._env.from_string(source)
        except TemplateSyntaxError as e:
            raise TemplateError(f"{name}: line {e.lineno}: {e.message}") from None
        except RecursionError:
            raise TemplateError(f"{name}: nested too deeply") from None

    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The prompt text; any failure of the template is a TemplateError naming it."""
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
        }
        out: list[str] = []
        size = 0
        try:
            for chunk in self._template.generate(**context):
                size += len(chunk)
                if size > self.max_output:
                    raise _TooLarge(f"output larger than {self.max_output} characters")
                out.append(chunk)
        except TemplateError as e:
            raise TemplateError(f"{self.name}: {_bare(e)}") from None
        except _TooLarge as e:
            raise TemplateError(f"{self.name}: refused to build {e}") from None
        except SecurityError as e:
            raise TemplateError(f"{self.name}: unsafe operation blocked: {e}") from None
        except RecursionError:
            raise TemplateError(f"{self.name}: recursion too deep") from None
        except MemoryError:  # the worker's limit, which it names
            raise
        except Exception as e:  # the template is foreign code: every failure is its failure
            raise TemplateError(f"{self.name}: {type(e).__name__}: {e}") from None
        return "".join(out)


def _bare(e: TemplateError) -> str:
    return str(e).removeprefix("template: ")
