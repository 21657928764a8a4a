"""Every binding to native code, on one floor that the runner, workers and daemon point down to.

- :mod:`~localllm.backends.contract`: :class:`BackendError` and the ``Model``/``Context``
  protocols both engines implement;
- :mod:`~localllm.backends.capabilities`: what each engine declares it can do;
- :mod:`~localllm.backends.llama_cpp`: llama.cpp's low-level API (model, context, batch);
- :mod:`~localllm.backends.native`: our kernels (``kernels/``): the library, the
  model's tensors, and the engine's ``Model``/``Context``;
- :mod:`~localllm.backends.ggml_devices`: ggml's device registry (memory, names);
- :mod:`~localllm.backends.rpc`: libggml-rpc (worker server, remote devices).

Nothing here imports the runner, the workers, the daemon or the CLI.
"""
