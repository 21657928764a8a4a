"""The runner process: one loaded model, served to the daemon over a unix socket.

Started as ``python -m localllm.runner`` (see :mod:`localllm.runner.__main__`
for the arguments and :mod:`localllm.runner.server` for the HTTP API).

Modules, one concern each:

- :mod:`~localllm.backends.capabilities`: the engine contract (what each engine declares it can do);
- :mod:`~localllm.backends.llama_cpp`: llama.cpp's low-level API (model, context, batch);
  the native engine's is :mod:`localllm.backends.native.backend`;
- :mod:`~localllm.runner.engine`: the continuous-batching loop over sequence slots;
- :mod:`~localllm.runner.stream_engine`: its KV on llama.cpp (a stream per slot, prefixes copied);
- :mod:`~localllm.runner.prefix_cache`: the stream engine's radix tree and host-RAM spill;
- :mod:`~localllm.runner.paged_engine`: its KV on the native engine (shared block tables);
- :mod:`~localllm.runner.kv_blocks`: the native engine's blocks, prefix index and host-RAM tier;
- :mod:`~localllm.runner.sampling`: per-sequence sampler chains (and GBNF grammars);
- :mod:`~localllm.runner.textstream`: UTF-8-safe, stop-string-safe streaming text;
- :mod:`~localllm.runner.relay`: engine-thread events to the HTTP side, in bursts;
- :mod:`~localllm.runner.speculation`: exact speculative decoding (prompt-lookup drafts, draft lengths);
- :mod:`~localllm.runner.draft_model`: draft models for it (a smaller model with the same vocabulary);
- :mod:`~localllm.runner.embed`: embeddings (``--embedding`` runners);
- :mod:`~localllm.runner.server`: the HTTP endpoints.

Threads, and what each owns (a request's output must never depend on what
else runs, so nothing below is shared without a reason written here):

- **The engine thread** (:class:`~localllm.runner.engine.Engine`) owns the
  context (llama.cpp's ``llama_context`` or libllk's ``llk_ctx``: decode,
  logits, KV cells and blocks), the batch, the KV books (slots, the prefix
  tree, the block pool, the host-RAM spill) and every submitted request's
  sampler (sample, accept, free). After each step it publishes what
  ``/health`` reports of them as a new dict (``Engine.kv_state``); nobody
  else reads the books.
- **The HTTP thread** (uvicorn's event loop) reads the vocabulary only, in
  calls llama.cpp makes read-only and re-entrant (its own server tokenizes on
  its HTTP threads too): ``llama_tokenize``, ``llama_token_to_piece`` into
  a buffer of each call's own (``Vocabulary._render``; the piece cache is filled
  from it, so an entry is the token's text whichever thread filled it), and
  the grammar and llguidance set-up of a new request's sampler. The BOS and
  EOS texts in ``/health`` are rendered once at load. It hands requests over
  through a thread-safe queue and cancels them by setting a flag.
- **The embedder thread** (``--embedding`` runners, in place of the engine
  thread) owns the embedding context; requests tokenize on ``asyncio.to_thread``
  workers and hand their tokens over through ``Embedder.submit``, and every
  waiting request's inputs share its passes.
- **The decode watchdog** (workers only) reads a start time.

:func:`~localllm.backends.llama_cpp.captured_errors` lends fd 2 to llama.cpp
while a model loads or a grammar compiles; our own log writes to a copy of
stderr made at start, so no thread's lines are lost to a capture.
"""
