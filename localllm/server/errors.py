"""Errors the API turns into a status code and a message a person can act on, and the
error body each dialect expects."""

from __future__ import annotations

from typing import Any

#: OpenAI's error ``type`` by status (under ``/v1``).
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "not_found_error", 413: "invalid_request_error", 503: "server_overloaded"}
#: Anthropic's error ``type`` by status (under ``/v1/messages``).
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error"}
ANTHROPIC_PATHS = "/v1/messages"


class ApiError(Exception):
    """An error answered in the body shape of the route's dialect (see :func:`error_body`)."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error body (also the data of a stream's ``error`` event)."""
    return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}


def openai_error(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error object (also the data of a stream's error event)."""
    return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "api_error"), "param": None,
                      "code": None}}


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """Ollama's ``{"error": "..."}``, OpenAI's error object under ``/v1``, Anthropic's under ``/v1/messages``."""
    if path.startswith(ANTHROPIC_PATHS):
        return anthropic_error(status, message)
    if path.startswith("/v1"):
        return openai_error(status, message)
    return {"error": message}
