"""The FastAPI app of ``serve-ppo-lstm``: its endpoints, their errors as JSON, and its middleware.

Endpoints (the OpenAPI page is ``/docs``, the schema ``/openapi.json``):

- ``GET /health``: the server is up, its route, fingerprint and session count;
- ``GET /sessions``: the open sessions' names;
- ``POST /sessions/{name}``: open a session on its history (201), answered with its first decision;
- ``GET /sessions/{name}``: the session, with its last answer;
- ``POST /sessions/{name}/bars``: the next closed bar, answered with the decision for the bar after it;
- ``POST /sessions/{name}/fill``: the real fill of the pending decision;
- ``DELETE /sessions/{name}``: close the session (its state file is removed).

Every error is ``{"error": "<one line>"}`` (with ``errors``, each problem, for a body that does not
validate): 401 without the token, 404 an unknown session, 409 a bar out of order or a session open
already, 413 a body over the limit, 422 bad input, 503 a state that could not be written. A session
serves one request at a time. Opening, reading, filling and closing run in the server's thread pool;
so does a bar when each state is fsynced (the fsync waits on the disk), while without fsync a bar is
answered on the event loop itself (its work does not wait, and a thread hop costs more than it).
"""
from __future__ import annotations

import json
import sys
import traceback
from contextlib import asynccontextmanager
from typing import Annotated, Any, AsyncIterator, Callable, Optional

from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from .. import __version__
from ..errors import UsageError, one_line
from .access import BearerAuth, BodyLimit
from .errors import RequestError
from .models import (Bar, Closed, DecisionAnswer, ErrorOut, Fill, Health, OpenSession, SessionList, SessionOut)
from .store import NAME_MAX, NAME_PATTERN, SessionStore

Name = Annotated[str, Path(pattern=NAME_PATTERN, max_length=NAME_MAX,
                           description="the session: letters, digits, '_' and '-', with single dots between them")]
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text}
    for status, text in ((401, "no bearer token, or another"), (404, "no such session"),
                         (409, "a bar out of order, or a session open already"), (413, "a body over the limit"),
                         (422, "bad input"), (503, "the state could not be written"))}


def _json(body: Any, status: int = 200) -> Response:
    """``body`` as a JSON answer (built here: the endpoints' dicts are their response models' fields)."""
    return Response(json.dumps(body, allow_nan=False, separators=(",", ":")), status, media_type="application/json")


def _error(status: int, message: str, errors: Optional[list[dict[str, Any]]] = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status)


def _validation(_: Request, err: RequestValidationError) -> JSONResponse:
    problems = [{"loc": [str(part) for part in e.get("loc", ())], "message": str(e.get("msg", ""))}
                for e in err.errors()]
    summary = "; ".join(f"{'.'.join(p['loc'])}: {p['message']}" for p in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return _error(422, f"the request does not validate: {summary}{more}", problems)


def _internal(_: Request, err: Exception) -> JSONResponse:
    traceback.print_exception(err, file=sys.stderr)
    return _error(500, f"internal error ({type(err).__name__}: {one_line(err)}); the session is as it was")


def add_error_handlers(app: FastAPI) -> None:
    """Every refused request answered as ``{"error": ...}`` with its status."""
    app.add_exception_handler(RequestError, lambda _, err: _error(err.status, str(err)))
    app.add_exception_handler(UsageError, lambda _, err: _error(422, one_line(err, 1000)))
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, lambda _, err: _error(err.status_code, str(err.detail)))
    app.add_exception_handler(Exception, _internal)


def create_app(store: SessionStore, info: dict[str, Any], token: Optional[bytes], max_body: int,
               on_shutdown: Callable[[], None]) -> FastAPI:
    """The app serving ``store``'s sessions; ``info``: the route, fingerprint and fsync of ``/health``;
    ``on_shutdown`` runs once the last request is answered."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        on_shutdown()

    app = FastAPI(title="serve-ppo-lstm", version=__version__, lifespan=lifespan, responses=_ERRORS,
                  description="A trained ppo-lstm-trader policy, one session per instrument: post each closed bar, "
                              "get the decision for the next one. Every change is on disk before it is answered.")
    add_error_handlers(app)

    fsync = bool(info.get("fsync"))

    async def call(work: Callable[..., Any], *args: Any, inline: bool = False) -> Any:
        """``work(*args)``: in the thread pool, or on the event loop when ``inline`` (work that does not wait)."""
        return work(*args) if inline else await run_in_threadpool(work, *args)

    @app.get("/health", response_model=Health, summary="The server is up")
    async def health() -> Response:
        return _json({"status": "ok", **info, "sessions": len(store.sessions)})

    @app.get("/sessions", response_model=SessionList, summary="The open sessions")
    async def sessions() -> Response:
        return _json({"sessions": store.names()})

    @app.post("/sessions/{name}", response_model=SessionOut, status_code=201,
              summary="Open a session on its history (predict-ppo-lstm's warm-up)")
    async def open_session(name: Name, request: OpenSession) -> Response:
        return _json(await call(store.open, name, request), 201)

    @app.get("/sessions/{name}", response_model=SessionOut, summary="A session and its last answer")
    async def read_session(name: Name) -> Response:
        return _json(await call(store.view, name))

    @app.post("/sessions/{name}/bars", response_model=DecisionAnswer,
              summary="The next closed bar; answered with the decision for the bar after it")
    async def post_bar(name: Name, bar: Bar) -> Response:
        return _json(await call(store.post, name, bar, inline=not fsync))

    @app.post("/sessions/{name}/fill", response_model=SessionOut,
              summary="The real fill of the pending decision (predict-ppo-lstm --fill)")
    async def report_fill(name: Name, fill: Fill) -> Response:
        return _json(await call(store.fill, name, fill))

    @app.delete("/sessions/{name}", response_model=Closed, summary="Close a session (its state files are removed)")
    async def close_session(name: Name) -> Response:
        return _json(await call(store.close, name))

    app.add_middleware(BodyLimit, limit=max_body)
    if token is not None:
        app.add_middleware(BearerAuth, token=token)
    return app
