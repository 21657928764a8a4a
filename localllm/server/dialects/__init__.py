"""One module per API dialect: a pure request translator into the conversation core
(``server/conversation.py``) and a stream renderer of its deltas. The routes that use them
are apart, in ``server/ollama_api.py``, ``server/openai_api.py`` and ``server/anthropic_api.py``;
what the OpenAI-family dialects share is in :mod:`~localllm.server.dialects.openai_family`."""
