"""A run directory's file names, and files written atomically (without torch, so the config
layer and the torch-free deploy path can write them).

A file is written to a temporary file created exclusively (``tempfile.mkstemp``: a random
name, ``O_EXCL``, so a planted file or symlink is never followed) in the same directory,
fsynced, then ``os.replace``-d into place (and the directory fsynced), so a kill at any
moment leaves the previous file intact.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Optional

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_u(\d{8})\.pt$")
LATEST_NAME = "latest"
BEST_NAME = "best.pt"
METRICS_NAME = "metrics.csv"
RUN_CONFIG_NAME = "config.yaml"  # the run's resolved settings, a --config file
TENSORBOARD_NAME = "tb"
RUN_LOG_NAME = "training.log"  # the run's own log (--log-file is shared by the runs started in a directory)
LOCK_NAME = ".lock"
PREVIOUS_PREFIX = "previous-"
# What a killed writer of this project can leave: ".<target>.<random>.tmp" for each file written
# atomically (mkstemp's 8 characters; older versions wrote ".<target>.<pid>.tmp"), and the
# ".write-test.<pid>" probe of the start-up check.
OWN_TEMP_PATTERN = re.compile(
    r"^\.(?:(?:checkpoint_u\d{8}\.pt|latest|best\.pt|config\.yaml|metrics\.csv|\.write-test\.\d+)"
    r"\.(?:\d+|[a-z0-9_]{8})\.tmp|write-test\.\d+)$")


class CheckpointError(Exception):
    """A checkpoint that cannot be written or read; the message names the file."""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_mode() -> int:
    """The mode a plain ``open`` gives a new file under the process umask (mkstemp gives 0o600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()  # read once: changing the umask for a moment is not thread-safe


def atomic_write_bytes(path: Path, write: Any,
                       advice: str = "free some disk space or choose another --checkpoint-dir") -> None:
    """Write a file via ``write(fileobj)`` to a temp file made by ``tempfile.mkstemp`` beside
    ``path`` (exclusive, a random name: nothing there is followed or overwritten), fsync, then
    rename over ``path``; the temp file is removed on any failure. A failure is a
    :class:`CheckpointError` naming the file, the reason and ``advice``."""
    path = Path(path)
    tmp: Optional[Path] = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), _FILE_MODE)
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    except OSError as err:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise CheckpointError(f"could not write {path}: {err.strerror or err}; {advice}") from None
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


