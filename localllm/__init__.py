"""localllm: a local-first LLM runner with Ollama- and OpenAI-compatible APIs."""

__version__ = "0.1.0"
