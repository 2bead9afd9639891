"""The server's sessions and its state directory: names, state files, the directory's lock, start-up.

``--state-dir DIR`` holds ``DIR/serve.lock`` (an exclusive ``flock`` for the server's lifetime: a
second server on the same directory is refused) and ``DIR/sessions/<name>/``, each session's state
files (``state_files.py``). A name is letters, digits, ``_`` and ``-``, with single dots between them
(``spy``, ``BTC-USD``, ``es.1h``), at most 64 characters, so it is always one folder name inside
``DIR/sessions``. At start every session's newest state is loaded (a server killed with ``kill -9``
goes on where its files stand), and what a killed write left is removed.
"""
from __future__ import annotations

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
from .state_files import StateFiles

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

    def files(self, name: str) -> StateFiles:
        """The state files of session ``name`` (always a folder inside the sessions folder)."""
        folder = self.folder / check_name(name)
        if folder.parent != self.folder:
            raise RequestError(422, f"session name {name!r} is not a file name")
        return StateFiles(folder, self.fsync)

    def load(self) -> int:
        """Load every session's newest state (UsageError, one line, naming a file or folder this server cannot
        use); returns how many. What writes a kill interrupted left is removed."""
        for folder in sorted(p for p in self.folder.iterdir() if not p.name.startswith(".")):
            files = None
            try:
                check_name(folder.name)
                if not folder.is_dir():
                    raise UsageError("not a session's folder")
                files = self.files(folder.name)
                files.tidy()
                self.sessions[folder.name] = Session.restore(folder.name, self.make_policy(), files)
            except (UsageError, RequestError) as err:
                where = files.latest() if files is not None and files.latest() is not None else folder
                raise UsageError(f"{where}: {err}; move it out of the state dir (an older generation beside it "
                                 f"is then read), or serve the policy that wrote it") from None
        return len(self.sessions)

    def get(self, name: str) -> Session:
        """Session ``name`` (RequestError 404 when none is open)."""
        check_name(name)
        session = self.sessions.get(name)
        if session is None:
            raise RequestError(404, f"no session {name!r}; open it with POST /sessions/{name} and its history")
        return session

    def open(self, name: str, request: OpenSession) -> dict[str, Any]:
        """A new session ``name`` on ``request``'s history, its view (409 when it exists; UsageError for bad
        input)."""
        files = self.files(name)
        with self._lock:
            if name in self.sessions or name in self._opening:
                raise RequestError(409, f"session {name!r} is open already; close it (DELETE /sessions/{name}) to "
                                        f"start it again")
            self._opening.add(name)
        try:
            files.remove()  # what a session closed or refused before may have left
            session = Session.open(name, self.make_policy(), files, request)
            with session.lock, self._lock:
                self.sessions[name] = session
                return session.view()
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

    def close(self, name: str) -> dict[str, Any]:
        """Close session ``name``: its state files removed (404 when none is open); what it had consumed."""
        session = self.get(name)
        with session.lock:
            _check_open(session)
            session.closed = True
            session.files.remove()
        with self._lock:
            self.sessions.pop(name, None)
        return {"session": name, "bars": session.policy.bars}

    def flush(self) -> None:
        """Every session's state file fsynced (each was written before its last answer; with --no-fsync
        it may not have reached the disk yet)."""
        for session in list(self.sessions.values()):
            with session.lock:
                if not session.closed:
                    session.files.sync()
        fsync_dir(self.folder)

    def names(self) -> list[str]:
        """The open sessions' names, sorted."""
        return sorted(self.sessions)


def _check_open(session: Session) -> None:
    """RequestError 404 for a session closed while its request waited for it."""
    if session.closed:
        raise RequestError(404, f"no session {session.name!r} (it was closed)")
