"""Bounds on what one request may ask for (LOCALLLM_MAX_* settings), checked before any work.

A body under the byte limit can still ask for a million messages, a huge
schema or an absurd context; each of these is a 400 naming the limit and the
variable that raises it.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import RequestLimits
from .errors import bad_request


def _over(what: str, value: int, name: str, limit: int) -> None:
    if value > limit:
        raise bad_request(f"{what} is {value}, over the limit of {limit} (LOCALLLM_MAX_{name.upper()})")


def check_request(limits: RequestLimits, *, texts: list[str] = (), messages: int = 0, documents: int = 0,
                  tools: list[Any] | None = None, constraint: Any = None, options: dict[str, Any] | None = None) -> None:
    """400 when the request exceeds any configured bound (``documents``: a rerank's, bounded as messages are)."""
    _over("the number of messages", messages, "messages", limits.messages)
    _over("the number of documents", documents, "messages", limits.messages)
    _over("the prompt length in characters", sum(len(t) for t in texts if t), "prompt_chars", limits.prompt_chars)
    _over("the number of tools", len(tools or []), "tools", limits.tools)
    if constraint is not None:
        size = len(constraint) if isinstance(constraint, str) else len(json.dumps(constraint))
        _over("the size of the schema or grammar in bytes", size, "schema_bytes", limits.schema_bytes)
    for option in ("num_predict", "num_ctx"):
        value = (options or {}).get(option)
        if isinstance(value, int):
            _over(f"option {option}", value, option, getattr(limits, option))
