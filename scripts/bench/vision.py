"""Images in: encode time and time to first token with one image, ours against llama-cpp-python's own mtmd path.

The model is SmolLM2-135M with the tests' colour projector (a LLaVA "mlp"
projector libmtmd loads; ``tests/gguf_builders.py``), the only vision model
this machine has. Each round makes a new 640x480 JPEG (a different picture
every round, so neither side serves it from a cache) and measures, in turn:

- **encode**: from the JPEG's bytes to the projector's embeddings. Ours:
  Pillow decode with the pixel checks, libmtmd tokenize, ``mtmd_encode_chunk``
  (``localllm.backends.projector``). llama-cpp-python's: ``Llava15ChatHandler``'s
  bitmap from the bytes (stb_image in libmtmd), tokenize, the same encode.
- **ttft**: a chat request with the image to its first streamed token. Ours:
  the runner process (``--projector``) over its unix socket, the image as
  base64 in the body. llama-cpp-python's: ``Llama.create_chat_completion`` with
  ``Llava15ChatHandler`` in this process (a data URL), streamed.

Both sides get the same ChatML prompt (llama-cpp-python's handler with our template and no
system message). Medians over rounds; a ratio is llama-cpp-python's time ÷ ours (above 1.0:
ours is faster).

    python scripts/bench/vision.py [--rounds 7] [--threads 2] [--json]

``--json`` prints ``encode_ms``, ``encode_ms_llama_cpp``, ``encode_ratio``, ``ttft_ms``,
``ttft_ms_llama_cpp``, ``ttft_ratio``, ``image_tokens``, ``rounds`` and ``cpu``.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import io
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_name, fixtures, report  # noqa: E402

QUESTION = "What colour is this picture? Answer in one word."
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'image_url' %}"
          "{{ c.image_url.url }}{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
          "<|im_start|>assistant\n")  # the same prompt as ours, the image URL where the marker goes


def photo(seed: int) -> bytes:
    """A 640x480 JPEG of smooth colour gradients and noise, different for every seed."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:480, 0:640]
    channels = [np.sin(x / rng.uniform(20, 90) + rng.uniform(0, 6)) + np.cos(y / rng.uniform(20, 90)) for _ in range(3)]
    pixels = np.stack(channels, axis=-1) * 60 + 128 + rng.normal(0, 12, (480, 640, 3))
    out = io.BytesIO()
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


class Ours:
    def __init__(self, threads: int) -> None:
        from support.runner import RunnerProcess

        from localllm.backends.llama_cpp import Model, init_backend
        from localllm.backends.projector import Projector

        init_backend()
        self.model = Model(fixtures.smollm2_gguf())
        self.projector = Projector(self.model, fixtures.smollm2_projector(), threads)
        self.runner = RunnerProcess(fixtures.smollm2_gguf(), "--projector", str(fixtures.smollm2_projector()),
                                    "--threads", str(threads), "--parallel", "1", "--ctx", "2048")
        self.runner.wait_ready()
        self.client = self.runner.client(timeout=600)

    def encode(self, image: bytes) -> float:
        import llama_cpp.mtmd_cpp as mtmd

        from localllm.images import MARKER, decode_image

        started = time.perf_counter()
        prompt = self.projector.tokenize(MARKER, [decode_image(image)])
        chunk = next(iter(prompt.images.values()))
        if mtmd.mtmd_encode_chunk(self.projector.ptr, chunk.ptr) != 0:
            raise RuntimeError("encode failed")
        elapsed = time.perf_counter() - started
        prompt.close()
        return elapsed

    def ttft(self, image: bytes) -> float:
        body = {"prompt": f"<|im_start|>user\n<__media__>{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
                "images": [base64.b64encode(image).decode()], "options": {"temperature": 0, "num_predict": 2}}
        started = time.perf_counter()
        with self.client.stream("POST", "/completion", json=body) as r:
            for line in r.iter_lines():
                if line and "content" in json.loads(line):
                    return time.perf_counter() - started
        raise RuntimeError("no token")

    def image_tokens(self, image: bytes) -> int:
        from localllm.images import MARKER, decode_image

        prompt = self.projector.tokenize(MARKER, [decode_image(image)], add_special=False)
        prompt.close()
        return len(prompt.tokens)

    def close(self) -> None:
        self.client.close()
        self.runner.cleanup()
        self.projector.close()
        self.model.close()


class LlamaCppPython:
    def __init__(self, threads: int) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Llava15ChatHandler

        self.handler = Llava15ChatHandler(clip_model_path=str(fixtures.smollm2_projector()), verbose=False)
        self.handler.DEFAULT_SYSTEM_MESSAGE = None  # the prompt our side sends: ChatML, no system message
        self.handler.CHAT_FORMAT = CHATML
        self.llm = llama_cpp.Llama(str(fixtures.smollm2_gguf()), chat_handler=self.handler, n_ctx=2048,
                                   n_threads=threads, verbose=False)
        self.handler._init_mtmd_context(self.llm)

    def encode(self, image: bytes) -> float:
        import llama_cpp.mtmd_cpp as mtmd

        ctx = self.handler.mtmd_ctx
        started = time.perf_counter()
        bitmap = self.handler._create_bitmap_from_bytes(image)
        chunks = mtmd.mtmd_input_chunks_init()
        text = mtmd.mtmd_input_text()
        marker = mtmd.mtmd_default_marker()
        text.text, text.text_len, text.add_special, text.parse_special = marker, len(marker), True, True
        if mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) != 0:
            raise RuntimeError("tokenize failed")
        every = [mtmd.mtmd_input_chunks_get(chunks, i) for i in range(mtmd.mtmd_input_chunks_size(chunks))]
        chunk = next(c for c in every if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE)
        if mtmd.mtmd_encode_chunk(ctx, chunk) != 0:
            raise RuntimeError("encode failed")
        elapsed = time.perf_counter() - started
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        return elapsed

    def ttft(self, image: bytes) -> float:
        url = "data:image/jpeg;base64," + base64.b64encode(image).decode()
        messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                 {"type": "text", "text": QUESTION}]}]
        started = time.perf_counter()
        for chunk in self.llm.create_chat_completion(messages=messages, max_tokens=2, temperature=0, stream=True):
            if chunk["choices"][0]["delta"].get("content"):
                return time.perf_counter() - started
        raise RuntimeError("no token")


def measure(sides: dict[str, object], what: str, rounds: int) -> dict[str, list[float]]:
    """``rounds`` timings of ``what`` per side; each round a new picture for every side, the sides taken in
    turn (first one, then the other), so the machine's noise of the moment hits both."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        image = photo(r if what == "encode" else 1000 + r)
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(getattr(sides[name], what)(image))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    ours = Ours(args.threads)
    try:
        sides = {"ours": ours, "llama_cpp": LlamaCppPython(args.threads)}
        for side in sides.values():  # warm both: the first encode reserves the projector's compute graph
            side.encode(photo(10**6))
            side.ttft(photo(10**6 + 1))
        samples = {what: measure(sides, what, args.rounds) for what in ("encode", "ttft")}
        image_tokens = ours.image_tokens(photo(0))
    finally:
        ours.close()

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 2)

    results = {
        "encode_ms": ms(samples["encode"]["ours"]),
        "encode_ms_llama_cpp": ms(samples["encode"]["llama_cpp"]),
        "ttft_ms": ms(samples["ttft"]["ours"]),
        "ttft_ms_llama_cpp": ms(samples["ttft"]["llama_cpp"]),
        "image_tokens": image_tokens,
        "rounds": args.rounds,
        "cpu": cpu_name(),
    }
    results["encode_ratio"] = round(results["encode_ms_llama_cpp"] / results["encode_ms"], 3)
    results["ttft_ratio"] = round(results["ttft_ms_llama_cpp"] / results["ttft_ms"], 3)
    rows = [("image encode (ms, median)", f"{results['encode_ms']} vs {results['encode_ms_llama_cpp']} "
                                           f"llama-cpp-python (x{results['encode_ratio']})"),
            ("time to first token, one image (ms)", f"{results['ttft_ms']} vs {results['ttft_ms_llama_cpp']} "
                                                     f"llama-cpp-python (x{results['ttft_ratio']})"),
            ("image tokens", image_tokens), ("cpu", results["cpu"])]
    report("vision: ours vs llama-cpp-python's mtmd path", rows, results, args.json)


if __name__ == "__main__":
    main()
