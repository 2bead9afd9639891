"""The server's sessions and its state directory: names, state files, the directory's lock, start-up.

``--state-dir DIR`` holds ``DIR/serve.lock`` (an exclusive ``flock`` for the server's lifetime: a
second server on the same directory is refused) and ``DIR/sessions/<name>.json``, one state file per
session. A name is letters, digits, ``_`` and ``-``, with single dots between them (``spy``,
``BTC-USD``, ``es.1h``), at most 64 characters, so it is always one file name inside
``DIR/sessions``. At start every state file there is loaded (a server killed with ``kill -9`` goes on
where its files stand), and temp files a killed write left are removed.
"""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

from ..deploy.files import HeldLock, fsync_dir, lock_holder
from ..deploy.policy import TradingPolicy
from ..errors import UsageError
from .errors import RequestError
from .models import Bar, Fill, OpenSession
from .session import Session

NAME_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
NAME_MAX = 64
LOCK_FILE = "serve.lock"
SESSIONS = "sessions"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str) -> str:
    """``name`` when it is a session name (RequestError 422 otherwise)."""
    if len(name) > NAME_MAX or not _NAME.match(name):
        raise RequestError(422, f"session name {name!r}: use letters, digits, '_' and '-', with single dots "
                                f"between them, at most {NAME_MAX} characters")
    return name


def lock_state_dir(directory: Path) -> HeldLock:
    """Hold ``DIR/serve.lock`` (UsageError, one line, while another server holds it)."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--state-dir {directory} is not a directory")
    try:
        (directory / SESSIONS).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create --state-dir {directory}: {err.strerror or err}") from None
    path = directory / LOCK_FILE
    return HeldLock(path, f"--state-dir {directory} is in use by another serve-ppo-lstm (pid {lock_holder(path)}, "
                          f"{path}); stop it, or choose another --state-dir")


class SessionStore:
    """The open sessions by name; ``make_policy`` gives a fresh ``TradingPolicy`` of the served model."""

    def __init__(self, directory: Path, make_policy: Callable[[], TradingPolicy], fsync: bool) -> None:
        self.folder = (directory / SESSIONS).resolve()
        self.make_policy, self.fsync = make_policy, fsync
        self.sessions: dict[str, Session] = {}
        self._opening: set[str] = set()
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        """The state file of session ``name`` (always inside the sessions folder)."""
        path = self.folder / f"{check_name(name)}.json"
        if path.parent != self.folder:
            raise RequestError(422, f"session name {name!r} is not a file name")
        return path

    def load(self) -> int:
        """Load every state file of the folder (UsageError, one line, naming a file this server cannot use);
        returns how many. Temp files of writes a kill interrupted are removed."""
        for leftover in self.folder.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
        for path in sorted(self.folder.glob("*.json")):
            name = path.name[:-len(".json")]
            try:
                check_name(name)
                self.sessions[name] = Session.restore(name, self.make_policy(), path, self.fsync)
            except (UsageError, RequestError) as err:
                raise UsageError(f"{path}: {err}; move it out of the state dir, or serve the policy that wrote "
                                 f"it") from None
        return len(self.sessions)

    def get(self, name: str) -> Session:
        """Session ``name`` (RequestError 404 when none is open)."""
        check_name(name)
        session = self.sessions.get(name)
        if session is None:
            raise RequestError(404, f"no session {name!r}; open it with POST /sessions/{name} and its history")
        return session

    def open(self, name: str, request: OpenSession) -> Session:
        """A new session ``name`` on ``request``'s history (409 when it exists; UsageError for bad input)."""
        path = self.path(name)
        with self._lock:
            if name in self.sessions or name in self._opening:
                raise RequestError(409, f"session {name!r} is open already; close it (DELETE /sessions/{name}) to "
                                        f"start it again")
            self._opening.add(name)
        try:
            session = Session.open(name, self.make_policy(), path, request, self.fsync)
            with self._lock:
                self.sessions[name] = session
            return session
        finally:
            with self._lock:
                self._opening.discard(name)

    def post(self, name: str, bar: Bar) -> dict[str, Any]:
        """Session ``name``'s answer to ``bar`` (``Session.post``), one request of the session at a time."""
        session = self.get(name)
        with session.lock:
            _check_open(session)
            return session.post(bar)

    def fill(self, name: str, fill: Fill) -> dict[str, Any]:
        """Report a fill to session ``name``; returns its view."""
        session = self.get(name)
        with session.lock:
            _check_open(session)
            session.fill(fill)
            return session.view()

    def view(self, name: str) -> dict[str, Any]:
        """Session ``name``'s view (``SessionOut``)."""
        session = self.get(name)
        with session.lock:
            _check_open(session)
            return session.view()

    def close(self, name: str) -> Session:
        """Close session ``name``: its state file removed (404 when none is open)."""
        session = self.get(name)
        with session.lock:
            _check_open(session)
            session.closed = True
            session.path.unlink(missing_ok=True)
            if self.fsync:
                fsync_dir(self.folder)
        with self._lock:
            self.sessions.pop(name, None)
        return session

    def flush(self) -> None:
        """Every session's state file fsynced (each was written before its last answer; with --no-fsync
        it may not have reached the disk yet)."""
        for session in list(self.sessions.values()):
            with session.lock:
                if not session.closed:
                    fd = os.open(session.path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
        fsync_dir(self.folder)

    def names(self) -> list[str]:
        """The open sessions' names, sorted."""
        return sorted(self.sessions)


def _check_open(session: Session) -> None:
    """RequestError 404 for a session closed while its request waited for it."""
    if session.closed:
        raise RequestError(404, f"no session {session.name!r} (it was closed)")
