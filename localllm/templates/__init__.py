"""Chat prompt rendering: Modelfile TEMPLATEs (Go syntax), GGUF chat templates (Jinja), the choice between
them, and what they receive for thinking."""

from localllm.templates.chat import ChatTemplate
from localllm.templates.gotemplate import GoTemplate, TemplateError, parse_template
from localllm.templates.prompt import PromptError, build_generate_prompt, build_prompt, validate_model_template
from localllm.templates.thinking import THINK_LEVELS, ThinkingTags, check_think

__all__ = [
    "THINK_LEVELS",
    "ChatTemplate",
    "GoTemplate",
    "PromptError",
    "TemplateError",
    "ThinkingTags",
    "build_generate_prompt",
    "build_prompt",
    "check_think",
    "parse_template",
    "validate_model_template",
]
