"""Which engine to hold output to a JSON schema with: llama.cpp's grammar sampler or llguidance.

Both engines run in this process over the same model, context and greedy
decode loop, on every schema of ``schemas.json``; only the sampling step
differs. Per engine: the share of schemas it accepts, the share of accepted
ones whose output parses and validates (``jsonschema``), and the sampling
cost per generated token (picking the token under the constraint and
advancing the constraint), beside the same loop's cost without a constraint.

Both run through the runner's :class:`~localllm.runner.sampling.Sampler`:

- llama.cpp: the GBNF from :func:`~localllm.server.formats.schema_grammar`
  (llama.cpp's converter plus our refusal of keywords it cannot express). It
  checks only the sampled token against the grammar and masks the whole
  vocabulary only when that token is refused.
- llguidance (what the API uses for schemas): the schema as
  :func:`~localllm.server.formats.checked_schema` accepts it, a
  whole-vocabulary token mask every step, applied to the logits.

    python scripts/bench/grammar_engines.py [--tokens 256] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import numpy as np

from common import fixtures, report
from localllm.backends.llama_cpp import Batch, Context, Model, init_backend
from localllm.options import CompletionOptions
from localllm.runner.sampling import GrammarError, Sampler
from localllm.server.errors import ApiError
from localllm.server.formats import checked_schema, schema_grammar
from support.runner import chat_prompt

SCHEMAS = Path(__file__).with_name("schemas.json")
GREEDY = CompletionOptions(temperature=0, repeat_penalty=1.0)

# a step: logits -> chosen token (advancing the constraint); None when the constraint is finished
Step = Callable[[np.ndarray], "int | None"]


@dataclass
class EngineResult:
    accepted: int = 0
    satisfied: int = 0
    step_seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class Generator:
    """A greedy decode loop over one sequence whose token choice is pluggable."""

    def __init__(self, model: Model, ctx: Context) -> None:
        self.model, self.ctx = model, ctx
        self.batch = Batch(ctx.n_batch)
        self.decode_seconds: list[float] = []

    def run(self, prompt: str, step: Step, limit: int, timings: list[float]) -> str:
        tokens = self.model.vocab.tokenize_prompt(prompt)
        self.ctx.seq_rm(0)
        self.batch.clear()
        for pos, token in enumerate(tokens):
            row = self.batch.add(token, pos, 0, pos == len(tokens) - 1)
        self._decode()
        out: list[int] = []
        for pos in range(len(tokens), len(tokens) + limit):
            logits = self._logits(row)
            started = time.perf_counter()
            token = step(logits)
            timings.append(time.perf_counter() - started)
            if token is None or self.model.vocab.is_eog(token):
                break
            out.append(token)
            self.batch.clear()
            row = self.batch.add(token, pos, 0, True)
            self._decode()
        return self.model.vocab.detokenize(out)

    def _logits(self, row: int) -> np.ndarray:
        import llama_cpp as ll

        view = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx.ptr, row), shape=(self.model.vocab.n_vocab,))
        return view.copy()  # engines may write -inf into it

    def _decode(self) -> None:
        started = time.perf_counter()
        if self.ctx.decode(self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        self.decode_seconds.append(time.perf_counter() - started)


def free_step(logits: np.ndarray) -> int:
    """Unconstrained greedy: the baseline cost of a step."""
    return int(logits.argmax())


class _RowLogits:
    """Hands the sampler this step's logits the way a context does (a native-style context)."""

    ptr = None

    def __init__(self, logits: np.ndarray) -> None:
        self._logits = logits

    def logits(self, row: int) -> np.ndarray:
        return self._logits


def sampler_step(model: Model, constraint: Callable[[dict], dict]) -> Callable[[dict], Step | str]:
    """Our runner's sampler under the constraint the API would send for a schema; a refusal message instead."""

    def make(schema: dict) -> Step | str:
        try:
            sampler = Sampler(model, GREEDY, 2048, **constraint(schema))
        except (ApiError, GrammarError) as exc:
            return str(exc)
        return lambda logits: sampler.sample(_RowLogits(logits), 0)

    return make


def evaluate(gen: Generator, make_step: Callable[[dict], Step | str], corpus: list[dict], limit: int) -> EngineResult:
    result = EngineResult()
    for entry in corpus:
        step = make_step(entry["schema"])
        if isinstance(step, str):
            result.failures.append(f"{entry['name']}: refused ({step[:100]})")
            continue
        result.accepted += 1
        text = gen.run(chat_prompt(entry["prompt"]), step, limit, result.step_seconds)
        try:
            jsonschema.validate(json.loads(text), entry["schema"])
            result.satisfied += 1
        except (ValueError, jsonschema.ValidationError) as exc:
            result.failures.append(f"{entry['name']}: {str(exc)[:80]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256, help="most tokens generated per schema")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    args = parser.parse_args()
    corpus = json.loads(SCHEMAS.read_text())
    init_backend()
    model = Model(fixtures.smollm2_gguf())
    ctx = Context(model, 2048, 1, 512, 2)
    gen = Generator(model, ctx)

    free = EngineResult()
    for entry in corpus:
        gen.run(chat_prompt(entry["prompt"]), free_step, 64, free.step_seconds)
    engines = {
        "llama.cpp": evaluate(gen, sampler_step(model, lambda schema: {"grammar": schema_grammar(schema)}),
                              corpus, args.tokens),
        "llguidance": evaluate(gen, sampler_step(model, lambda schema: {"json_schema": checked_schema(schema)}),
                               corpus, args.tokens),
    }
    decode_ms = statistics.median(gen.decode_seconds) * 1e3
    results: dict = {
        "schemas": len(corpus),
        "decode_ms_per_token": round(decode_ms, 3),
        "unconstrained_step_us": round(statistics.mean(free.step_seconds) * 1e6, 1),
    }
    rows: list[tuple[str, object]] = [
        ("schemas in corpus", len(corpus)),
        ("decode ms/token (model)", decode_ms),
        ("unconstrained step us/token", results["unconstrained_step_us"]),
    ]
    for name, r in engines.items():
        key = name.replace(".", "_")
        step_us = statistics.mean(r.step_seconds) * 1e6 if r.step_seconds else 0.0
        results[key] = {
            "accepted_share": round(r.accepted / len(corpus), 3),
            "satisfied_share_of_accepted": round(r.satisfied / r.accepted, 3) if r.accepted else 0.0,
            "step_us_mean": round(step_us, 1),
            "step_us_p99": round(float(np.percentile(r.step_seconds, 99)) * 1e6, 1) if r.step_seconds else 0.0,
            "cost_share_of_decode": round(step_us / 1e3 / decode_ms, 4),
            "failures": r.failures,
        }
        rows += [
            (f"{name}: accepted share", results[key]["accepted_share"]),
            (f"{name}: satisfied share", results[key]["satisfied_share_of_accepted"]),
            (f"{name}: step us/token mean", results[key]["step_us_mean"]),
            (f"{name}: step us/token p99", results[key]["step_us_p99"]),
        ]
    report("grammar engines on the schema corpus (SmolLM2-135M, greedy, 2 threads)", rows, results, args.json)
    if not args.json:
        for name in engines:
            for line in results[name.replace(".", "_")]["failures"]:
                print(f"  {name}: {line}")


if __name__ == "__main__":
    main()
