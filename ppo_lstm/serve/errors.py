"""``RequestError``: a request the server refuses, with its HTTP status and a one-line message."""
from __future__ import annotations


class RequestError(Exception):
    """A refused request: ``status`` (404 unknown session, 409 a bar out of order or a session that
    exists, 422 bad input, 503 a state that could not be written) and ``str(err)``, one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
