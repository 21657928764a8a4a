"""Errors the API turns into a status code and a message a person can act on."""

from __future__ import annotations


class ApiError(Exception):
    """An error answered as ``{"error": message}`` (Ollama) or OpenAI's error object."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)
