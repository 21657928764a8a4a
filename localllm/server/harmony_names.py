"""Tool names gpt-oss can write: Harmony addresses a call to ``functions.NAME``, NAME a TypeScript identifier.

A client's tool may be named ``get-weather`` or ``search.web``; Harmony's
``to=functions.get-weather`` would not be read back as that tool. As Ollama's
Harmony handler does, each offered tool goes into the prompt under a name made
of letters, digits, ``_`` and ``$`` (spaces, ``-`` and ``.`` become ``_``,
anything else is dropped, a leading digit gets a ``_``, an empty name is
``unnamed``, a name taken already gets ``_2``, ``_3``...), Harmony's built-in
tools keep theirs, and each call the model makes goes back to the client under
the tool's own name. The conversation's earlier calls and tool results are
renamed alike, so the prompt names each tool one way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .conversation import ChatTurn, Message

#: Harmony's built-in tools, never renamed.
BUILT_IN = ("browser.open", "browser.search", "browser.find", "python")


def _identifier(name: str) -> str:
    kept = "".join("_" if c in " -." else c for c in name if c.isalnum() or c in "_$ -.")
    if not kept:
        return "unnamed"
    return "_" + kept if kept[0].isdigit() else kept


@dataclasses.dataclass
class HarmonyNames:
    """The names of one request's tools in the prompt, both ways."""

    to_harmony: dict[str, str] = dataclasses.field(default_factory=dict)
    to_user: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, tools: list[dict[str, Any]]) -> HarmonyNames:
        """Prompt names for the offered ``tools``, in their order."""
        names = cls()
        for tool in tools:  # not checked yet: a malformed tool is left to ToolUse's 400
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and name and name not in names.to_harmony:
                names.add(name)
        return names

    def add(self, name: str) -> None:
        base = name if name in BUILT_IN else _identifier(name)
        candidate, count = base, 2
        while candidate in self.to_user:
            candidate, count = f"{base}_{count}", count + 1
        self.to_harmony[name], self.to_user[candidate] = candidate, name

    @property
    def renames(self) -> bool:
        return any(user != harmony for user, harmony in self.to_harmony.items())

    def prompt_name(self, name: str) -> str:
        return self.to_harmony.get(name, name)

    def apply(self, turn: ChatTurn) -> ChatTurn:
        """``turn`` with its tools, its forced function and its conversation's calls under Harmony's names."""
        tools = [{**tool, "function": {**tool["function"], "name": self.prompt_name(tool["function"]["name"])}}
                 if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
                 and isinstance(tool["function"].get("name"), str) else tool for tool in turn.tools or []]
        choice = turn.tool_choice
        if choice not in ("auto", "none", "required"):
            choice = self.prompt_name(choice)
        return dataclasses.replace(turn, tools=tools, tool_choice=choice,
                                   messages=[self._message(m) for m in turn.messages])

    def _message(self, message: Message) -> Message:
        if not message.tool_calls and not message.tool_name:
            return message
        calls = [dataclasses.replace(call, name=self.prompt_name(call.name)) for call in message.tool_calls]
        return dataclasses.replace(message, tool_calls=calls, tool_name=self.prompt_name(message.tool_name))
