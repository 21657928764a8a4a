"""Chat formats of model families, as data: how a family's model writes its thinking and its
tool calls, and how a model's format is chosen.

One streaming parser (``localllm.server.output_parser``) reads these
descriptions; nothing here parses. A format names:

- the tags around a thinking block (and a channel label some families write
  after the opening tag, Gemma 4's ``thought``);
- the markers a model writes between blocks that carry no text of the answer
  (Harmony's ``<|start|>assistant``, ``<|end|>``…), dropped, and the role
  header a prompt ends with that the answer continues (Harmony's, which may
  go on with the recipient of a call: ``<|start|>assistant to=functions.f``);
- its tool-call syntax: the marker a call starts with, the one it ends with
  (none: the call runs to the next call or the end of the answer), markers
  around a group of calls, and which decoder reads a call's text
  (``localllm.server.tools``).

A model's format is the Modelfile's ``PARSER`` (else ``RENDERER``) when it
names one (Ollama's names), else what its architecture and chat template show.
"""

from __future__ import annotations

from dataclasses import dataclass

from localllm.templates.thinking import ThinkingTags


@dataclass(frozen=True)
class CallSyntax:
    """How one family writes tool calls."""

    name: str
    opening: tuple[str, ...]  # a call starts at one of these (the first is the one grammars write)
    closing: str | None  # a call ends here; None: at the next opening or at the end of the answer
    body: str  # the decoder of a call's text (between opening and closing), see tools.decode_calls
    wrappers: tuple[str, ...] = ()  # written around a group of calls; dropped
    inner: tuple[str, ...] = ()  # markers inside a call's text, which its decoder reads


@dataclass(frozen=True)
class ChatFormat:
    """One family's output format (Ollama's ``PARSER`` names where Ollama has one)."""

    name: str
    calls: CallSyntax | None
    thinking: ThinkingTags | None = None  # None: the template's own tags, if any (see ``thinking_tags``)
    thinking_label: str = ""  # written right after the opening tag (Gemma 4's channel name), dropped
    dropped: tuple[str, ...] = ()  # markers between blocks that are no text of the answer
    answer_start: str = ""  # a prompt ending in this leaves it to the answer (Harmony's role header)
    # named by a Modelfile: whether a model of this format thinks (None: as its template shows)
    thinks: bool | None = None
    calls_end_thinking: bool = False  # a call may open inside the thinking block, which it closes (Laguna)

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker the format writes: where one is a control token, the runner must pass it on as text."""
        found = list(self.dropped)
        if self.thinking:
            found += self.thinking
        if self.calls:
            found += [*self.calls.opening, *self.calls.wrappers, *self.calls.inner]
            if self.calls.closing:
                found.append(self.calls.closing)
        return tuple(dict.fromkeys(found))


THINK = ThinkingTags("<think>", "</think>")

HERMES_CALLS = CallSyntax("hermes", ("<tool_call>",), "</tool_call>", "json")
QWEN_XML_CALLS = CallSyntax("qwen-xml", ("<tool_call>",), "</tool_call>", "qwen-xml")
GLM_CALLS = CallSyntax("glm", ("<tool_call>",), "</tool_call>", "glm")
LLAMA3_CALLS = CallSyntax("llama3", ("<|python_tag|>",), None, "json")
MISTRAL_CALLS = CallSyntax("mistral", ("[TOOL_CALLS]",), None, "json")  # [TOOL_CALLS][{…}, …]
MINISTRAL_CALLS = CallSyntax("ministral", ("[TOOL_CALLS]",), None, "mistral", inner=("[ARGS]", "[CALL_ID]"))  # [TOOL_CALLS]NAME[ARGS]{…}
GRANITE_CALLS = CallSyntax("granite", ("<|tool_call|>",), None, "json")
GEMMA4_CALLS = CallSyntax("gemma4", ("<|tool_call>",), "<tool_call|>", "gemma4", inner=('<|"|>',))
FUNCTIONGEMMA_CALLS = CallSyntax("functiongemma", ("<start_function_call>",), "<end_function_call>", "functiongemma",
                                 inner=("<escape>",))
LFM2_CALLS = CallSyntax("lfm2", ("<|tool_call_start|>",), "<|tool_call_end|>", "pythonic")
OLMO3_CALLS = CallSyntax("olmo3", ("<function_calls>",), "</function_calls>", "pythonic")  # one call a line
DEEPSEEK_CALLS = CallSyntax("deepseek", ("<｜tool▁call▁begin｜>",), "<｜tool▁call▁end｜>", "deepseek",
                            wrappers=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), inner=("<｜tool▁sep｜>",))
COHERE_CALLS = CallSyntax("cohere", ("<|START_ACTION|>",), "<|END_ACTION|>", "json")  # [{"tool_name", "parameters"}, …]
# Glimmer: a message to the tool, ``<|start|>assistant to=NAME<|message|><atem:function_calls>…``, or the bare
# block in a message to the user
GLIMMER_CALLS = CallSyntax("glimmer", ("<|start|>assistant to=", "<atem:function_calls>"), "</atem:function_calls>",
                           "atem", inner=("<|message|>",))
# Harmony: a message to ``functions.NAME``, its recipient after the channel or in the role header.
HARMONY_CALLS = CallSyntax("harmony", ("<|channel|>commentary to=", "<|start|>assistant to="), "<|call|>", "harmony",
                           inner=("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>"))

HARMONY = ChatFormat(
    "harmony", HARMONY_CALLS,
    thinking=ThinkingTags("<|channel|>analysis<|message|>", "<|end|>"),
    dropped=("<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>",
             "<|end|>", "<|return|>", "<|call|>"),
    answer_start="<|start|>assistant", thinks=True,
)

# Glimmer: messages by recipient, ``to=self`` its thinking, ``to=user`` its answer
GLIMMER = ChatFormat(
    "glimmer", GLIMMER_CALLS,
    thinking=ThinkingTags("<|start|>assistant to=self<|message|>", "<|eom|>"),
    dropped=("<|start|>assistant to=user<|message|>", "<|start|>assistant<|message|>", "<|start|>assistant",
             "<|eom|>", "<|eot|>"),
    answer_start="<|start|>assistant", thinks=True,
)

#: Every format by its name: Ollama's ``PARSER`` names, and ours for the older syntaxes.
FORMATS: dict[str, ChatFormat] = {f.name: f for f in (
    ChatFormat("hermes", HERMES_CALLS),  # Qwen 2.5/3, SmolLM, Hermes: JSON in <tool_call>
    ChatFormat("qwen3", HERMES_CALLS, THINK, thinks=False),
    ChatFormat("qwen3-thinking", HERMES_CALLS, THINK, thinks=True),
    ChatFormat("qwen3-vl-instruct", HERMES_CALLS, THINK, thinks=False),
    ChatFormat("qwen3-vl-thinking", HERMES_CALLS, THINK, thinks=True),
    ChatFormat("qwen3-coder", QWEN_XML_CALLS, thinks=False),
    ChatFormat("qwen3.5", QWEN_XML_CALLS, THINK, thinks=True),
    ChatFormat("ornith", QWEN_XML_CALLS, THINK, thinks=True),
    HARMONY,
    GLIMMER,
    ChatFormat("gemma4", GEMMA4_CALLS, ThinkingTags("<|channel>", "<channel|>"), thinking_label="thought",
               thinks=True),
    ChatFormat("gemma4-no-thinking", GEMMA4_CALLS, thinks=False),
    ChatFormat("ministral", MINISTRAL_CALLS, ThinkingTags("[THINK]", "[/THINK]")),
    ChatFormat("mistral", MISTRAL_CALLS),
    ChatFormat("deepseek3", DEEPSEEK_CALLS, THINK, thinks=True),
    ChatFormat("cogito", DEEPSEEK_CALLS, THINK, thinks=True),  # Cogito v2: DeepSeek R1's calls
    ChatFormat("nemotron-3-nano", QWEN_XML_CALLS, THINK, thinks=True),
    ChatFormat("nemotron-3.5-nano", QWEN_XML_CALLS, THINK, thinks=True),
    ChatFormat("laguna", GLM_CALLS, THINK, thinks=True, calls_end_thinking=True),  # Poolside's: GLM's calls
    ChatFormat("poolside-v1", GLM_CALLS, THINK, thinks=True, calls_end_thinking=True),
    ChatFormat("cohere", COHERE_CALLS, ThinkingTags("<|START_THINKING|>", "<|END_THINKING|>"),
               dropped=("<|START_TEXT|>", "<|END_TEXT|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
                        "<|END_OF_TURN_TOKEN|>"), thinks=True),
    ChatFormat("glm-4.7", GLM_CALLS, THINK, thinks=True),
    ChatFormat("glm-ocr", GLM_CALLS, thinks=False),
    ChatFormat("olmo3", OLMO3_CALLS, thinks=False),
    ChatFormat("olmo3-think", None, THINK, thinks=True),
    ChatFormat("functiongemma", FUNCTIONGEMMA_CALLS, thinks=False),
    ChatFormat("lfm2", LFM2_CALLS, thinks=False),
    ChatFormat("lfm2-thinking", LFM2_CALLS, THINK, thinks=True),
    # Granite 3.3 thinks in <think> and answers in <response> when its template asks (3.2: "Here is my thought
    # process:" ... "Here is my response:", the template's own tags)
    ChatFormat("granite", GRANITE_CALLS, THINK, dropped=("<response>", "</response>")),
    ChatFormat("llama3", LLAMA3_CALLS),
    ChatFormat("passthrough", None, thinks=False),  # no parsing: the answer is all content
)}

#: Ollama's ``RENDERER`` names, by the format whose prompts they write.
RENDERERS: dict[str, str] = {
    **{name: name for name in FORMATS},
    "deepseek3.1": "deepseek3", "gemma4-small": "gemma4", "gemma4-large": "gemma4",
    "olmo3.1": "olmo3", "olmo3-32b-think": "olmo3-think", "qwen3.8": "qwen3.5",
}


class UnknownFormat(ValueError):
    """A PARSER or RENDERER name that names no format we know."""


def format_named(name: str, instruction: str = "PARSER") -> ChatFormat:
    """The format a Modelfile's PARSER (or RENDERER) names; UnknownFormat listing the known names."""
    table = RENDERERS if instruction == "RENDERER" else {n: n for n in FORMATS}
    if name not in table:
        raise UnknownFormat(f"unknown {instruction} {name!r}; known: {', '.join(sorted(table))}")
    return FORMATS[table[name]]


def detect_format(architecture: str | None, template: str) -> ChatFormat:
    """The format a model's architecture and chat template show (Hermes when nothing else does)."""
    arch = (architecture or "").replace("-", "").lower()
    if arch == "gptoss" or ("<|channel|>" in template and "<|message|>" in template):
        return HARMONY
    if "<function=" in template and "<parameter=" in template:
        return FORMATS["qwen3.5" if "<think>" in template else "qwen3-coder"]
    if "<|tool_call>" in template or "<|channel>" in template:
        return FORMATS["gemma4"]
    if "<arg_key>" in template:
        return FORMATS["glm-4.7"]
    if "tool▁calls▁begin" in template:
        return FORMATS["deepseek3"]
    if "<|tool_call_start|>" in template:
        return FORMATS["lfm2-thinking" if "<think>" in template else "lfm2"]
    if "[ARGS]" in template or "[THINK]" in template:
        return FORMATS["ministral"]
    if "[TOOL_CALLS]" in template:
        return FORMATS["mistral"]
    if "<|tool_call|>" in template:
        return FORMATS["granite"]
    if "<|python_tag|>" in template or "ipython" in template or "<|eom_id|>" in template:
        return FORMATS["llama3"]
    return FORMATS["hermes"]
