"""Per-sequence sampler chains, built from Ollama options, run in C.

Every token is sampled by ``llama_sampler_sample`` on the chain, so the
per-token cost stays in llama.cpp; Python only builds the chain once per
request. Samplers that would be no-ops with the given options are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp as ll

from localllm.runner.backend import Context, Model, captured_errors
from localllm.runner.options import CompletionOptions


class GrammarError(ValueError):
    """A GBNF grammar that llama.cpp cannot parse."""


class Sampler:
    """A sampler chain for one sequence: grammar → penalties → filters → pick.

    Order as llama.cpp's common sampler: penalties, top_k, typical, top_p,
    min_p, temperature, then a seeded random pick (or mirostat, or greedy
    at temperature 0). The grammar comes first so every later step only sees
    tokens the grammar allows.
    """

    def __init__(self, model: Model, options: CompletionOptions, n_ctx: int, grammar: str | None = None) -> None:
        params = ll.llama_sampler_chain_default_params()
        params.no_perf = True
        self.chain = ll.llama_sampler_chain_init(params)
        self._penalties = None
        self._penalty_window = 0
        try:
            if grammar:
                self._add(_grammar_sampler(model, grammar))
            self._add_penalties(model, options, n_ctx)
            self._add_selection(model, options)
        except BaseException:
            self.close()
            raise

    def _add(self, sampler: ll.llama_sampler_p) -> ll.llama_sampler_p:
        ll.llama_sampler_chain_add(self.chain, sampler)
        return sampler

    def _add_penalties(self, model: Model, o: CompletionOptions, n_ctx: int) -> None:
        active = o.repeat_penalty != 1.0 or o.frequency_penalty != 0.0 or o.presence_penalty != 0.0
        if not active or o.repeat_last_n == 0:
            return
        last_n = n_ctx if o.repeat_last_n < 0 else o.repeat_last_n  # -1: the whole context, as Ollama
        self._penalty_window = last_n
        self._penalties = self._add(
            ll.llama_sampler_init_penalties(
                model.n_vocab, last_n, o.repeat_penalty, o.frequency_penalty, o.presence_penalty
            )
        )

    def _add_selection(self, model: Model, o: CompletionOptions) -> None:
        seed = ll.LLAMA_DEFAULT_SEED if o.seed < 0 else o.seed & 0xFFFFFFFF
        if o.temperature <= 0:
            self._add(ll.llama_sampler_init_greedy())
        elif o.mirostat == 1:
            self._add(ll.llama_sampler_init_temp(o.temperature))
            self._add(ll.llama_sampler_init_mirostat(model.n_vocab, seed, o.mirostat_tau, o.mirostat_eta, 100))
        elif o.mirostat == 2:
            self._add(ll.llama_sampler_init_temp(o.temperature))
            self._add(ll.llama_sampler_init_mirostat_v2(seed, o.mirostat_tau, o.mirostat_eta))
        else:
            if o.top_k > 0:
                self._add(ll.llama_sampler_init_top_k(o.top_k))
            if o.typical_p < 1.0:
                self._add(ll.llama_sampler_init_typical(o.typical_p, 1))
            if o.top_p < 1.0:
                self._add(ll.llama_sampler_init_top_p(o.top_p, 1))
            if o.min_p > 0.0:
                self._add(ll.llama_sampler_init_min_p(o.min_p, 1))
            self._add(ll.llama_sampler_init_temp(o.temperature))
            self._add(ll.llama_sampler_init_dist(seed))

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        """Let the repeat penalties see the prompt (not the grammar: it constrains output only)."""
        if self._penalties is None:
            return
        for token in tokens[-self._penalty_window :]:  # older tokens would fall out of the window
            ll.llama_sampler_accept(self._penalties, token)

    def sample(self, ctx: Context, row: int) -> int:
        """Pick the next token from the logits of batch row ``row`` and accept it."""
        return ll.llama_sampler_sample(self.chain, ctx.ptr, row)

    def close(self) -> None:
        if self.chain:
            ll.llama_sampler_free(self.chain)
            self.chain = None


def _grammar_sampler(model: Model, grammar: str) -> ll.llama_sampler_p:
    with captured_errors() as errors:
        sampler = ll.llama_sampler_init_grammar(model.vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError(f"invalid grammar: {_grammar_problem(errors)}")
    return sampler


def _grammar_problem(lines: list[str]) -> str:
    """The useful part of llama.cpp's complaint (it also echoes the whole grammar)."""
    problems = [line.strip().rsplit("error parsing grammar: ", 1)[-1] for line in lines if "grammar" in line]
    specific = [p for p in problems if p != "failed to parse grammar"]
    return "; ".join(dict.fromkeys(specific or problems)) or "the grammar does not parse"
