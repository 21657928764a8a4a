"""``create --quantize``: llama.cpp's own quantizer, run in a child process.

The quantizer is native code; running it in a child keeps a crash (or its
memory) away from the daemon. Only unquantized sources (F32, F16, BF16) are
accepted, as Ollama does: re-quantizing a quantized model loses quality silently.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..config import CHILD_CWD
from ..gguf import read_gguf

#: Ollama's names for the targets (lower-case) → llama.cpp's ``llama_ftype``.
QUANT_TYPES = {
    "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12,
    "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18,
}
#: ``general.file_type`` values of unquantized GGUF files.
UNQUANTIZED_FILE_TYPES = {0: "F32", 1: "F16", 32: "BF16"}


class QuantizeError(RuntimeError):
    """Quantization was refused or failed; the message says which and why."""


def quantize_gguf(source: Path, target: Path, quant: str) -> None:
    """Write ``source`` quantized to ``quant`` (e.g. ``q4_K_M``) into ``target``."""
    ftype = QUANT_TYPES.get(quant.lower())
    if ftype is None:
        raise QuantizeError(f"unknown quantization {quant!r}; choose one of {', '.join(sorted(QUANT_TYPES))}")
    file_type = read_gguf(source, skip_arrays_over=0).metadata.get("general.file_type")  # no array is needed
    if file_type not in UNQUANTIZED_FILE_TYPES:
        raise QuantizeError(
            f"cannot quantize a model that is already quantized (file type {file_type}); "
            "start from an F16, BF16 or F32 GGUF"
        )
    result = subprocess.run(
        [sys.executable, "-m", "localllm.registry.quantize", str(source), str(target), str(ftype)],
        capture_output=True, text=True, cwd=CHILD_CWD,
    )
    if result.returncode != 0 or not target.is_file():
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise QuantizeError(f"quantization to {quant} failed: {tail or f'exit status {result.returncode}'}")


if __name__ == "__main__":
    from localllm.backends.llama_cpp import quantize_file

    sys.exit(quantize_file(sys.argv[1], sys.argv[2], int(sys.argv[3])))
