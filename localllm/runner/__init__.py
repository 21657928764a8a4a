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
- :mod:`~localllm.runner.embed`: embeddings (``--embedding`` runners);
- :mod:`~localllm.runner.server`: the HTTP endpoints.
"""
