"""Who may talk to the server: the bind address, the bearer token, and the ASGI middleware that checks both.

The server binds to loopback unless told otherwise, and refuses a non-loopback address without a
token (``check_bind``). With ``--token-file``, every request must carry ``Authorization: Bearer
<token>``, compared in constant time (``hmac.compare_digest``); a request without it, or with
another, is answered 401 before it reaches the app (``BearerAuth``). ``BodyLimit`` answers 413 to a
body over the size limit, without reading it whole.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

from starlette.exceptions import HTTPException

from ..errors import UsageError

TOKEN_MIN = 16
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: Optional[bytes]) -> None:
    """UsageError (one line) for a non-loopback ``host`` without a token."""
    if token is None and not is_loopback(host):
        raise UsageError(f"--host {host} is not a loopback address, and without --token-file anyone who can reach "
                         f"it could trade through this server: pass --token-file FILE, or bind 127.0.0.1 behind a "
                         f"reverse proxy")


def read_token(path: Path) -> bytes:
    """The token in ``path`` (surrounding whitespace dropped); UsageError unless it is there and long enough."""
    try:
        text = path.read_bytes().strip()
    except OSError as err:
        raise UsageError(f"--token-file {path}: {err.strerror or err}") from None
    if len(text) < TOKEN_MIN or any(c < 0x21 or c > 0x7E for c in text):
        raise UsageError(f"--token-file {path}: the token must be at least {TOKEN_MIN} printable characters without "
                         f"spaces, e.g. python -c \"import secrets; print(secrets.token_urlsafe(32))\" > {path}")
    if os.stat(path).st_mode & 0o077:
        print(f"note: --token-file {path} can be read by other users; chmod 600 it", flush=True)
    return text


async def send_json(send: Send, status: int, body: dict[str, Any], headers: Optional[list[tuple[bytes, bytes]]] = None
                    ) -> None:
    """Answer ``status`` with ``body`` as JSON (a raw ASGI response)."""
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


class BearerAuth:
    """ASGI middleware: 401 for an HTTP request whose bearer token is not ``token``."""

    def __init__(self, app: App, token: bytes) -> None:
        self.app, self.expected = app, b"Bearer " + token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = next((value for key, value in scope["headers"] if key == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                what = "no bearer token" if not given else "a wrong bearer token"
                await send_json(send, 401, {"error": f"{what}: send the header 'Authorization: Bearer <token>' with "
                                                     f"the token of --token-file"},
                                [(b"www-authenticate", b"Bearer")])
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, by its Content-Length at once, or
    while it is read (an ``HTTPException`` the app's handler answers)."""

    def __init__(self, app: App, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is over the limit of {self.limit} bytes (--max-body-bytes)"
        length = next((value for key, value in scope["headers"] if key == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await send_json(send, 413, {"error": message})
            return
        received = 0

        async def limited() -> dict[str, Any]:
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, message)
            return event

        await self.app(scope, limited, send)
