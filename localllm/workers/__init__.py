"""Spreading one model over several machines with llama.cpp's RPC backend (ggml-rpc).

A ``localllm worker`` serves its machine's devices through ggml's own RPC
server; a daemon given workers (``LOCALLLM_WORKERS``) asks each what memory
it has and places layers there, and its runner opens the model with those
remote devices, so llama.cpp itself moves tensors and activations.

- :mod:`~localllm.backends.rpc`: the ctypes binding of libggml-rpc (server, client devices, protocol version);
- :mod:`~localllm.workers.serve`: the ``localllm worker`` process;
- :mod:`~localllm.workers.probe`: asking a worker for its devices and free memory, in a child process.

The daemon's side: :mod:`localllm.server.worker_pool` (which workers are free),
:func:`localllm.server.memory.plan_worker_layers` (which layers go where) and
the runner's :class:`localllm.backends.llama_cpp.Offload` (the devices llama.cpp opens).
"""
