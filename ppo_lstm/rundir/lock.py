"""``RunLock``: one training job per run dir, held by rank 0 for the whole run (an advisory
``flock`` on ``<checkpoint-dir>/.lock``, released by the kernel when the process ends).
``waiting_lock``: the same kind of lock on any file, waiting a bounded time for its holder
(``predict-ppo-lstm --state``)."""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from ..errors import UsageError
from .checkpoint import LOCK_NAME


class RunLock:
    """An exclusive ``flock`` on ``<checkpoint-dir>/.lock`` for the life of a run.

    The kernel drops the lock when the process dies, however it dies; a clean exit
    also removes the file. Because the file is removed, a lock only counts once the
    locked file is still the one at the path: a process that opened the file just
    before its holder removed it would otherwise lock a file nobody else can see.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = Path(directory) / LOCK_NAME
        self._handle: Optional[Any] = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = open(self.path, "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                owner = handle.read().strip() or "unknown"
                handle.close()
                raise UsageError(f"checkpoint dir {self.path.parent} is in use by another run (pid {owner}); "
                                 f"wait for it to finish or choose another --checkpoint-dir") from None
            if self._is_current(handle):
                break
            handle.close()  # the holder removed this file after we opened it: lock the new one
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def _is_current(self, handle: Any) -> bool:
        """Whether ``handle`` is the file now at :attr:`path`."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(handle.fileno())
        return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)

    def release(self) -> None:
        """Remove the file while still holding the lock, then unlock (see the class docstring)."""
        if self._handle is None:
            return
        self.path.unlink(missing_ok=True)
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *_: Any) -> None:
        self.release()


@contextmanager
def waiting_lock(path: Path, wait_s: float, busy: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing, never through a symlink) for
    the ``with`` block, then remove it (as :class:`RunLock`). While another process holds it,
    retry for up to ``wait_s`` seconds, then UsageError(``busy``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as err:
            raise UsageError(f"cannot lock {path}: {err.strerror or err}; remove it if it is not a plain file, or "
                             f"check that its directory is writable") from None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise UsageError(busy) from None
                    time.sleep(0.05)
            held, on_disk = os.fstat(fd), _stat(path)
        except BaseException:
            os.close(fd)
            raise
        if on_disk is not None and (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino):
            break
        os.close(fd)  # its holder removed this file after we opened it: lock the one now at the path
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _stat(path: Path) -> Optional[os.stat_result]:
    try:
        return os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
