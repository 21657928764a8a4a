"""The architectures the native engine loads, one module each (as llama.cpp's ``src/models/<arch>.cpp``).

A module holds an :class:`~localllm.backends.native.archs.base.Architecture`: the ``<arch>.*`` metadata keys
it reads, its tensors' names and shapes, the hyperparameters it reads otherwise, and what it sets in the C
model struct and layers. Its forward half is the recipe of the same name in ``kernels/arch_<name>.c``
(``kernels/recipe.h``). ``model.py`` does the loading, checking and repacking common to all.

To add an architecture: write ``archs/<name>.py`` with a subclass of ``Architecture`` overriding what differs
from the plain pre-norm decoder (new layer tensors: a field in ``llk_layer``, its mirror in ``lib.Layer`` and
its GGUF name in ``base.GGUF_NAMES``) and ``ARCHITECTURE = <it>()``, list the module in ``_MODULES`` below, and
add the C recipe (``kernels/recipe.h`` says how).
"""

from __future__ import annotations

from localllm.backends.native.archs import gemma3, gemma4, gptoss, llama, phi3, qwen2, qwen3, qwen3moe, qwen35
from localllm.backends.native.archs.base import Architecture

_MODULES = (llama, qwen2, qwen3, gemma3, phi3, qwen3moe, gptoss, gemma4, qwen35)
ARCHITECTURES: dict[str, Architecture] = {m.ARCHITECTURE.name: m.ARCHITECTURE for m in _MODULES}
ARCHITECTURES[qwen35.MOE_ARCHITECTURE.name] = qwen35.MOE_ARCHITECTURE  # one module, both Qwen 3.5 families
