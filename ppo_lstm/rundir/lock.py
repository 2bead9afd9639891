"""``RunLock``: one training job per run dir, held by rank 0 for the whole run (an advisory
``flock`` on ``<checkpoint-dir>/.lock``, released by the kernel when the process ends). The
same kind of lock on any file, waiting a bounded time for its holder (``predict-ppo-lstm
--state``), is ``ppo_lstm.deploy.files.waiting_lock``, which imports no torch."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from .atomic import LOCK_NAME


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
        """Take the lock, creating the directory; UsageError (one line) while another run holds it
        or where the directory cannot be written."""
        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                handle = open(self.path, "a+")
            except OSError as err:
                raise UsageError(f"--checkpoint-dir {self.path.parent} is not writable ({err}); fix its "
                                 f"permissions or choose another directory") from None
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
