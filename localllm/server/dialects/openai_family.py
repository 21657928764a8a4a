"""What the OpenAI-family dialects share: chat completions, Responses and Anthropic's Messages
map sampling fields, output formats, reasoning effort, images, audio, tool calls and tool choice alike."""

from __future__ import annotations

from typing import Any

from ...media import MediaError, input_audio_data
from ...images import ImageError, data_url_image
from ..conversation import ThinkSetting
from ..errors import bad_request
from ..formats import JSON_OBJECT_GBNF, NO_CONSTRAINT, Constraint, checked_schema
from ..tools import ToolCall, call_arguments


def sampling_options(temperature: float | None, top_p: float | None, max_tokens: int | None,
                     stop: str | list[str] | None = None, seed: int | None = None,
                     top_k: int | None = None) -> dict[str, Any]:
    """OpenAI-style sampling fields as Ollama options; temperature and top_p default to 1, as OpenAI's."""
    options: dict[str, Any] = {"temperature": 1.0 if temperature is None else temperature,
                               "top_p": 1.0 if top_p is None else top_p}
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if seed is not None:
        options["seed"] = seed
    if top_k is not None:
        options["top_k"] = top_k
    if stop:
        options["stop"] = [stop] if isinstance(stop, str) else list(stop)
    return options


def response_format_constraint(response_format: dict[str, Any] | None, field: str = "response_format") -> Constraint:
    """OpenAI's ``response_format`` (chat) or ``text.format`` (Responses) as an output constraint."""
    if not response_format:
        return NO_CONSTRAINT
    kind = response_format.get("type")
    if kind in (None, "text"):
        return NO_CONSTRAINT
    if kind == "json_object":
        return Constraint(grammar=JSON_OBJECT_GBNF)
    if kind == "json_schema":
        # chat nests the schema under json_schema; Responses puts it beside the type
        spec = response_format.get("json_schema", response_format)
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise bad_request(f"{field}.json_schema must be an object with a 'schema' object")
        return Constraint(json_schema=checked_schema(spec.get("schema") or {}))
    raise bad_request(f"{field}.type {kind!r} is not supported: use text, json_object or json_schema")


def reasoning_think(effort: str | None, field: str = "reasoning_effort") -> ThinkSetting:
    """OpenAI's reasoning effort as a think setting (``none`` turns thinking off)."""
    if effort is None:
        return None
    if effort == "none":
        return False
    if effort in ("low", "medium", "high"):
        return effort
    raise bad_request(f"invalid {field} {effort!r}: use none, low, medium or high")


def image_data(url: str, field: str) -> str:
    """The base64 data of an image given as a ``data:`` URL (remote URLs are refused: nothing is downloaded)."""
    try:
        return data_url_image(url, field)
    except ImageError as exc:
        raise bad_request(str(exc)) from None


def audio_data(part: Any, field: str) -> str:
    """The base64 data of an ``input_audio`` object (chat's content part and Responses' input item alike).

    It joins the message's images: media travel together, told apart by their bytes (as Ollama's ``images``)."""
    try:
        return input_audio_data(part, field)
    except MediaError as exc:
        raise bad_request(str(exc)) from None


def openai_tool_call(call: dict[str, Any], field: str) -> ToolCall:
    """A tool call as OpenAI clients send it back (arguments as a JSON string)."""
    function = call.get("function") or {}
    name = str(function.get("name", ""))
    return ToolCall(name, call_arguments(function.get("arguments", "{}"), field, name), str(call.get("id") or ""))


def tool_choice_of(choice: str | dict[str, Any] | None) -> str:
    """OpenAI's ``tool_choice`` as the core's: auto, none, required or a function name."""
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict) and choice["function"].get("name"):
        return choice["function"]["name"]
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return choice["name"]  # the Responses API's flat form
    raise bad_request(f"invalid tool_choice {choice!r}: use none, auto, required or a function")
