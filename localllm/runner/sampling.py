"""Per-sequence sampler chains, built from Ollama options, run in C.

Without a grammar every token is picked by one ``llama_sampler_sample`` call,
so the per-token cost stays in llama.cpp; Python only builds the chain once
per request, leaving out samplers that would be no-ops with the options.
Greedy decoding (temperature 0) is an argmax over the logits in place, which
spares llama.cpp copying the whole vocabulary into a candidate array for
every token. The repeat, frequency and presence penalties (Ollama applies a
repeat penalty of 1.1 by default) are applied in place to the few recent
tokens they concern: llama.cpp's penalties sampler looks every vocabulary
entry up in a hash map, about 0.5 ms a token on a 50k vocabulary, 5% of a
small model's decode step and 8% of a batched one.

With a GBNF grammar, checking all ~50k vocabulary entries against it for
every token is slow, so we do what llama.cpp's own sampler does: pick a token
without the grammar, check only that one token against it, and only when
the grammar rejects it pick again with the grammar applied to the whole
vocabulary. A JSON schema goes to llguidance instead, whose whole-vocabulary
mask costs a fraction of a millisecond: the logits of tokens the schema does
not allow next become -inf before the chain runs (see
``scripts/bench/grammar_engines.py`` for the figures behind the choice).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
import math
from collections.abc import Sequence

import llama_cpp as ll
import numpy as np

from localllm.backends.llama_cpp import Context, Model, captured_errors
from localllm.options import CompletionOptions

log = logging.getLogger("localllm.runner")

#: How llguidance writes JSON: compact, with the usual separators (its default lets whitespace run on).
LLGUIDANCE_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

# struct llama_token_data { llama_token id; float logit; float p; }
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class GrammarError(ValueError):
    """A GBNF grammar that llama.cpp cannot parse."""


class Sampler:
    """Picks the tokens of one sequence: penalties → filters → pick, under an optional grammar.

    Chain order as llama.cpp's common sampler: penalties, top_k, typical,
    top_p, min_p, temperature, then a seeded random pick (or mirostat, or
    greedy at temperature 0).
    """

    def __init__(self, model: Model, options: CompletionOptions, n_ctx: int, grammar: str | None = None,
                 triggers: Sequence[str] = (), json_schema: dict | None = None) -> None:
        params = ll.llama_sampler_chain_default_params()
        params.no_perf = True
        self.chain = ll.llama_sampler_chain_init(params)
        self._grammar = None
        self._n_vocab = model.vocab.n_vocab
        self._logits_type = ctypes.c_float * model.vocab.n_vocab  # made once: np.ctypeslib.as_array makes one a call
        try:
            self._penalties = _Penalties.from_options(options, n_ctx)
            self._add_selection(model, options)
            self._top_logprobs = options.top_logprobs if options.logprobs else -1
            self.last_logprobs: tuple[float, list[tuple[int, float]]] | None = None
            self._greedy = options.temperature <= 0 and not grammar and self._top_logprobs < 0
            self._argmax = self._greedy and json_schema is None and self._penalties is None
            self._schema = _SchemaMatcher(model, json_schema) if json_schema is not None else None
            self._candidates: _Candidates | None = None  # made on first use: ~1 MB per 50k vocabulary
            if grammar:
                self._grammar = _grammar_sampler(model, grammar, triggers)
                self._probe = _Candidates(1)
        except BaseException:
            self.close()
            raise

    def _add(self, sampler: ll.llama_sampler_p) -> ll.llama_sampler_p:
        ll.llama_sampler_chain_add(self.chain, sampler)
        return sampler

    def _add_selection(self, model: Model, o: CompletionOptions) -> None:
        seed = ll.LLAMA_DEFAULT_SEED if o.seed < 0 else o.seed & 0xFFFFFFFF
        if o.temperature <= 0:
            self._add(ll.llama_sampler_init_greedy())
        elif o.mirostat == 1:
            self._add(ll.llama_sampler_init_temp(o.temperature))
            self._add(ll.llama_sampler_init_mirostat(model.vocab.n_vocab, seed, o.mirostat_tau, o.mirostat_eta, 100))
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
        if self._penalties is not None:
            for token in tokens[-self._penalties.window :]:  # older tokens would fall out of the window
                self._penalties.accept(token)

    def sample(self, ctx: Context, row: int) -> int:
        """Pick the next token from the logits of batch row ``row`` and accept it."""
        logits = self._logits(ctx, row)
        if self._argmax:  # the same pick as llama.cpp's greedy sampler: the first highest logit
            return int(logits.argmax())
        if self._penalties is not None:
            self._penalties.apply(logits)  # in place: the chain (or the argmax) sees penalised logits
        if self._schema is not None:
            self._schema.restrict(logits)  # in place: what follows sees only allowed tokens
        token = int(logits.argmax()) if self._greedy else self._pick(ctx, row, logits)
        if self._penalties is not None:
            self._penalties.accept(token)
        if self._schema is not None:
            self._schema.accept(token)
        return token

    def _pick(self, ctx: Context, row: int, logits: np.ndarray) -> int:
        """Run the chain (and the grammar) over ``logits``, which are row ``row``'s as the caller left them."""
        if self._grammar is None and ctx.ptr is not None and self._top_logprobs < 0:
            return ll.llama_sampler_sample(self.chain, ctx.ptr, row)  # reads the same memory as ``logits``
        if self._candidates is None:
            self._candidates = _Candidates(self._n_vocab)
        token = self._candidates.pick(logits, self.chain)
        if self._grammar is not None:
            if not self._grammar_allows(token):
                token = self._candidates.pick(logits, self.chain, first=self._grammar)
            ll.llama_sampler_accept(self._grammar, token)
        ll.llama_sampler_accept(self.chain, token)
        if self._top_logprobs >= 0:
            self.last_logprobs = self._candidates.logprobs(token, self._top_logprobs)
        return token

    def _logits(self, ctx: Context, row: int) -> np.ndarray:
        """The logits of batch row ``row``, in place (no copy); the native engine has no llama_context."""
        if ctx.ptr is None:
            return ctx.logits(row)
        row_logits = ll.llama_get_logits_ith(ctx.ptr, row)
        return np.frombuffer(self._logits_type.from_address(ctypes.addressof(row_logits.contents)), dtype=np.float32)

    def _grammar_allows(self, token: int) -> bool:
        probe = self._probe
        probe.data["id"] = token
        probe.data["logit"] = 1.0
        probe.reset(1)
        ll.llama_sampler_apply(self._grammar, probe.ref)
        return not math.isinf(probe.data["logit"][0])

    def close(self) -> None:
        if self.chain:
            ll.llama_sampler_free(self.chain)
            self.chain = None
        if self._grammar:
            ll.llama_sampler_free(self._grammar)
            self._grammar = None


class _Penalties:
    """llama.cpp's repeat, frequency and presence penalties over the last ``window`` tokens,
    with its float32 arithmetic, computed for the recent tokens only."""

    def __init__(self, window: int, repeat: float, frequency: float, presence: float) -> None:
        self.window = window
        self._repeat, self._frequency, self._presence = np.float32(repeat), np.float32(frequency), np.float32(presence)
        self._recent: collections.deque[int] = collections.deque()
        self._counts: collections.Counter[int] = collections.Counter()

    @classmethod
    def from_options(cls, o: CompletionOptions, n_ctx: int) -> _Penalties | None:
        """None when the options make every penalty a no-op (as llama.cpp's sampler skips itself)."""
        active = o.repeat_penalty != 1.0 or o.frequency_penalty != 0.0 or o.presence_penalty != 0.0
        if not active or o.repeat_last_n == 0:
            return None
        window = n_ctx if o.repeat_last_n < 0 else o.repeat_last_n  # -1: the whole context, as Ollama
        return cls(window, o.repeat_penalty, o.frequency_penalty, o.presence_penalty)

    def accept(self, token: int) -> None:
        self._recent.append(token)
        self._counts[token] += 1
        if len(self._recent) > self.window:
            old = self._recent.popleft()
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]

    def apply(self, logits: np.ndarray) -> None:
        """Penalise, in place, the logits of the tokens seen in the window."""
        if not self._counts:
            return
        ids = np.fromiter(self._counts.keys(), dtype=np.int64, count=len(self._counts))
        counts = np.fromiter(self._counts.values(), dtype=np.float32, count=len(self._counts))
        values = logits[ids]
        with np.errstate(divide="ignore", invalid="ignore"):  # a repeat penalty of 0, as llama.cpp allows
            values = np.where(values <= 0, values * self._repeat, values / self._repeat)
        logits[ids] = values - (counts * self._frequency + self._presence)


class _SchemaMatcher:
    """llguidance holding one sequence's output to a JSON schema: a token mask every step."""

    def __init__(self, model: Model, schema: dict) -> None:
        import llguidance

        tokenizer = _llguidance_tokenizer(model)
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=LLGUIDANCE_JSON_OPTIONS)
        problem = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if problem:
            raise GrammarError(f"unsupported JSON schema: {problem.strip()}")
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        self._mask = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self._ends = np.array(_end_tokens(model), dtype=np.int64)

    def restrict(self, logits: np.ndarray) -> None:
        """Set the logits of the tokens the schema does not allow next to -inf."""
        if self._matcher.is_error():  # cannot happen while we only pick allowed tokens; end rather than run free
            keep = logits[self._ends]
            logits.fill(-np.inf)
            logits[self._ends] = keep
            return
        self._matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        allowed = np.unpackbits(self._mask.view(np.uint8), bitorder="little", count=len(logits)).view(bool)
        np.copyto(logits, -np.inf, where=~allowed)

    def accept(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            log.error("llguidance refused token %d: %s", token, self._matcher.get_error())


def _end_tokens(model: Model) -> list[int]:
    """The tokens that end a generation (EOS, EOT): the schema allows them once the JSON is complete."""
    return sorted({t for t in (ll.llama_vocab_eos(model.vocab.ptr), ll.llama_vocab_eot(model.vocab.ptr)) if t >= 0})


@functools.cache
def _llguidance_tokenizer(model: Model):
    """llguidance's view of the model's vocabulary: built once per model (about a second)."""
    import llguidance.llamacpp

    return llguidance.llamacpp.lltokenizer_from_vocab(model.vocab.ptr, eos_token=_end_tokens(model))


class _Candidates:
    """A reusable ``llama_token_data_array`` over a numpy buffer."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = np.zeros(size, dtype=_TOKEN_DATA)
        self._ids = np.arange(size, dtype=np.int32)
        self._array = ll.llama_token_data_array(
            data=self.data.ctypes.data_as(ll.llama_token_data_p), size=size, selected=-1, sorted=False
        )
        self.ref = ctypes.byref(self._array)

    def reset(self, size: int) -> None:
        self._array.size = size
        self._array.selected = -1
        self._array.sorted = False

    def pick(self, logits: np.ndarray, chain: ll.llama_sampler_p, first: ll.llama_sampler_p | None = None) -> int:
        """Run ``first`` (the grammar) then ``chain`` over all logits; the selected token."""
        self.data["id"] = self._ids
        self.data["logit"] = logits
        self.data["p"] = 0.0
        self.reset(self.size)
        if first is not None:
            ll.llama_sampler_apply(first, self.ref)
        ll.llama_sampler_apply(chain, self.ref)
        return int(self.data["id"][self._array.selected])

    def logprobs(self, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
        """Log-probability of ``token`` and the ``top`` likeliest tokens, in the distribution
        the chain left (after penalties, truncation, temperature and the grammar)."""
        kept = self.data[: self._array.size]
        logits = kept["logit"].astype(np.float64)
        finite = np.isfinite(logits)
        peak = logits[finite].max()
        logprobs = np.where(finite, logits - peak, -np.inf)
        logprobs -= math.log(np.exp(logprobs[finite]).sum())
        where = np.nonzero(kept["id"] == token)[0]
        chosen = float(logprobs[where[0]]) if len(where) else -math.inf
        order = np.argsort(-logprobs)[:top] if top else []
        return chosen, [(int(kept["id"][i]), float(logprobs[i])) for i in order]


def _grammar_sampler(model: Model, grammar: str, triggers: Sequence[str] = ()) -> ll.llama_sampler_p:
    """llama.cpp's grammar sampler; with ``triggers``, a lazy one that waits for the first of those words.

    A lazy sampler lets every token through (and sees only their text) until a
    trigger appears; then it applies the grammar from the trigger's first byte.
    """
    with captured_errors() as errors:
        if triggers:
            # matched against all text so far; the grammar starts at the capture group
            patterns = [f"[\\s\\S]*?({_regex_literal(word)})[\\s\\S]*".encode() for word in triggers]
            words = (ctypes.c_char_p * len(patterns))(*patterns)
            sampler = ll.llama_sampler_init_grammar_lazy_patterns(
                model.vocab.ptr, grammar.encode("utf-8"), b"root", words, len(patterns), None, 0
            )
        else:
            sampler = ll.llama_sampler_init_grammar(model.vocab.ptr, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError(f"invalid grammar: {_grammar_problem(errors)}")
    return sampler


def _regex_literal(word: str) -> str:
    """``word`` as an ECMAScript regex matching it literally (llama.cpp compiles triggers with std::regex)."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in word)


def _grammar_problem(lines: list[str]) -> str:
    """The useful part of llama.cpp's complaint (it also echoes the whole grammar)."""
    problems = [line.strip().rsplit("error parsing grammar: ", 1)[-1] for line in lines if "grammar" in line]
    specific = [p for p in problems if p != "failed to parse grammar"]
    return "; ".join(dict.fromkeys(specific or problems)) or "the grammar does not parse"
