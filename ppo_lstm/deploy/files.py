"""Files of the deploy route, without torch: atomic writes and ``flock`` locks.

``atomic_write`` writes bytes to a temp file made by ``tempfile.mkstemp`` beside the target
(exclusive, a random name: nothing planted there is followed), optionally fsyncs it, and renames it
over the target, so a reader (or a process killed mid-write) sees the old file or the new one,
never half of one. ``waiting_lock`` holds an exclusive ``flock`` on a lock file for a block, waiting
a bounded time for another holder; ``held_lock`` takes one at once or not at all. Both follow the
protocol of ``ppo_lstm.rundir.lock`` (the file is created without following a symlink, removed on
release, and a lock on a file its holder removed is taken again), so the two interoperate.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from ..errors import UsageError

FILE_MODE = 0o666 & ~os.umask(os.umask(0))  # the mode a plain open() gives a new file (read once, at import)


def fsync_dir(directory: Path) -> None:
    """fsync a directory (its entries: a rename or a removal in it), where the OS allows."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through a temp file beside it renamed over it; with ``fsync``, the
    file and its directory are fsynced (the write survives a lost machine, not only a killed
    process). OSError on failure, the temp file removed."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp: Optional[Path] = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(data)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        os.replace(name, path)
        tmp = None
        if fsync:
            fsync_dir(path.parent)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _open_lock(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as err:
        raise UsageError(f"cannot lock {path}: {err.strerror or err}; remove it if it is not a plain file, or "
                         f"check that its directory is writable") from None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (a holder removes the file when it lets go)."""
    try:
        on_disk = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _lock(path: Path, wait_s: float, busy: str) -> int:
    """An fd holding an exclusive ``flock`` on ``path``, retried for ``wait_s`` seconds, then UsageError(``busy``)."""
    deadline = time.monotonic() + wait_s
    while True:
        fd = _open_lock(path)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise UsageError(busy) from None
                    time.sleep(0.05)
            if _same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed this file after we opened it: lock the one now at the path


def _unlock(fd: int, path: Path) -> None:
    path.unlink(missing_ok=True)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def waiting_lock(path: str | os.PathLike, wait_s: float, busy: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the ``with`` block, then remove it; while another
    process holds it, retry for up to ``wait_s`` seconds, then UsageError(``busy``)."""
    path = Path(path)
    fd = _lock(path, wait_s, busy)
    try:
        yield
    finally:
        _unlock(fd, path)


class HeldLock:
    """An exclusive ``flock`` on ``path`` taken at once (UsageError(``busy``) while another process
    holds it), with this process's pid written in it, until :meth:`release`."""

    def __init__(self, path: str | os.PathLike, busy: str) -> None:
        self.path = Path(path)
        self.fd: Optional[int] = _lock(self.path, 0.0, busy)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Let go of the lock (once)."""
        if self.fd is not None:
            _unlock(self.fd, self.path)
            self.fd = None


def lock_holder(path: str | os.PathLike) -> str:
    """The pid a ``HeldLock`` wrote in ``path`` ("?" when it cannot be read)."""
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return "?"
    return text if text.isdigit() else "?"
