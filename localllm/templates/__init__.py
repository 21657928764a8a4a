"""Chat prompt rendering: Modelfile TEMPLATEs (Go syntax), GGUF chat templates (Jinja), and the choice between them."""

from localllm.templates.chat import ChatTemplate
from localllm.templates.gotemplate import GoTemplate, TemplateError, parse_template
from localllm.templates.prompt import PromptError, build_generate_prompt, build_prompt, validate_model_template

__all__ = [
    "ChatTemplate",
    "GoTemplate",
    "PromptError",
    "TemplateError",
    "build_generate_prompt",
    "build_prompt",
    "parse_template",
    "validate_model_template",
]
