"""The Responses API's stored responses (``store: true``), kept so that a later request can
continue one with ``previous_response_id``, or fetch or delete it.

The store lives in the daemon's memory only: it holds the most recently used
:data:`MAX_STORED_RESPONSES` responses (least recently used ones go first) and
is empty again after a restart. Each entry holds the whole conversation up to
and including that response's output, without its instructions (which, as in
OpenAI's API, are not carried over to the next response); the messages of a
chain are shared between its entries, not copied.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .conversation import Message
from .errors import not_found

MAX_STORED_RESPONSES = 100


@dataclass(frozen=True)
class StoredResponse:
    conversation: list[Message]  # every message up to and including the response's output
    response: dict[str, Any]  # the response object as it was answered


class ResponseStore:
    """The last :data:`MAX_STORED_RESPONSES` responses, least recently used evicted first."""

    def __init__(self, capacity: int = MAX_STORED_RESPONSES) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def save(self, response_id: str, conversation: list[Message], response: dict[str, Any]) -> None:
        self._entries[response_id] = StoredResponse(conversation, response)
        self._entries.move_to_end(response_id)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, response_id: str, field: str = "response id") -> StoredResponse:
        """The stored response; 404 naming ``field`` when it is unknown (never stored, evicted or deleted)."""
        entry = self._entries.get(response_id)
        if entry is None:
            raise not_found(f"{field} {response_id!r} not found: only responses created with store true are kept, "
                            f"the last {self.capacity} of them, in memory until the daemon restarts")
        self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        del self._entries[response_id]
