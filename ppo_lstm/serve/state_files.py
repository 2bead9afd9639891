"""A session's state files: one generation per change, each written atomically under a fresh name.

A session's folder ``DIR/sessions/<name>/`` holds ``state-<generation>.json`` files, each a whole
state in predict's format (``predict-ppo-lstm --state`` reads any of them). A change is written to a
temp file, fsynced (with fsync on), renamed to the next generation's name, the folder fsynced, and
the generation two back removed: the newest generation and the one before it stay. Renaming to a
name that does not exist yet, rather than over the last file, spares the flush that ext4 (its
``auto_da_alloc``) forces on a rename over an existing file, a millisecond or more a bar. A process
killed at any point leaves the previous generation whole, and a temp file that is removed at start.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..deploy.files import FILE_MODE, fsync_dir

_NAME = re.compile(r"state-(\d{12})\.json")


class StateFiles:
    """The generations of one session's state in ``folder``; ``generation`` is the newest (0: none yet)."""

    def __init__(self, folder: Path, fsync: bool) -> None:
        self.folder, self.fsync = folder, fsync
        self.generation = max(self.generations(), default=0)

    def path(self, generation: int) -> Path:
        return self.folder / f"state-{generation:012d}.json"

    def generations(self) -> list[int]:
        """The generations on disk, oldest first."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for m in map(_NAME.fullmatch, names) if m)

    def latest(self) -> Optional[Path]:
        """The newest generation's file (None when there is none)."""
        return self.path(self.generation) if self.generation else None

    def write(self, data: bytes) -> Path:
        """``data`` as the next generation (OSError when it cannot be written; then nothing changed)."""
        self.folder.mkdir(exist_ok=True)
        nxt = self.generation + 1
        fd, name = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), FILE_MODE)
                handle.write(data)
                handle.flush()
                if self.fsync:
                    os.fsync(handle.fileno())
            os.rename(name, self.path(nxt))
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        if self.fsync:
            fsync_dir(self.folder)
        self.generation = nxt
        self.path(nxt - 2).unlink(missing_ok=True)
        return self.path(nxt)

    def tidy(self) -> None:
        """Remove temp files a killed write left, and generations older than the one before the newest."""
        for leftover in self.folder.glob(".state-*.tmp"):
            leftover.unlink(missing_ok=True)
        for generation in self.generations():
            if generation < self.generation - 1:
                self.path(generation).unlink(missing_ok=True)

    def sync(self) -> None:
        """fsync the newest generation and the folder."""
        latest = self.latest()
        if latest is not None:
            fd = os.open(latest, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.folder)

    def remove(self) -> None:
        """Remove the folder and every file in it."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.generation = 0
        if self.fsync:
            fsync_dir(self.folder.parent)
