"""A training run's hold on its --checkpoint-dir: :func:`open_run` locks it, finds the
checkpoint ``--resume`` goes on from, lets the caller check the run against it, then claims
the directory for a fresh run (refused while it holds a run, unless ``--overwrite``, which
moves that run aside).

The command line opens the run before any worker starts and holds the lock for its workers;
a job launched without it (under torchrun, or ``launch()`` from code) has rank 0 open it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, NamedTuple, Optional, TypeVar

from ..config.schema import TrainConfig
from ..rundir.checkpoint import CheckpointDir
from ..rundir.lock import RunLock

Checked = TypeVar("Checked")


class Resume(NamedTuple):
    """The checkpoint a ``--resume`` goes on from: its path and its state (already migrated)."""

    path: str
    state: dict[str, Any]


@dataclass(frozen=True)
class OpenRun(Generic[Checked]):
    """An opened run dir: the ``lock`` held on it (give it back when the run ends), the
    checkpoint to ``resume`` (None for a fresh run), what the caller's check returned, and the
    start-up ``notes`` (what ``--overwrite`` moved where)."""

    lock: RunLock
    resume: Optional[Resume]
    checked: Checked
    notes: tuple[str, ...]


def newest_checkpoint(config: TrainConfig) -> Resume:
    """``--resume``: the newest valid checkpoint in --checkpoint-dir, warning on stderr about each
    newer file skipped as unreadable (UsageError when none is valid)."""
    path, state, skipped = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints).load_newest_valid()
    for line in skipped:
        print(f"warning: {line}; falling back to an older checkpoint", file=sys.stderr)
    return Resume(str(path), state)


def open_run(config: TrainConfig, check: Callable[[Optional[Resume]], Checked]) -> OpenRun[Checked]:
    """Lock --checkpoint-dir (UsageError while a live run holds it), find the checkpoint to resume
    (with ``--resume``), run ``check`` on it (None for a fresh run; it raises UsageError for a run
    that cannot start), then claim the directory for a fresh run. When any step fails the lock
    is given back, nothing is moved, and the directories the lock created are removed."""
    missing = _missing_dirs(Path(config.checkpoint_dir))
    lock = RunLock(config.checkpoint_dir)
    lock.acquire()
    try:
        directory = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints)
        resume = newest_checkpoint(config) if config.resume and not config.overwrite else None  # both: refused by check
        checked = check(resume)
        notes: tuple[str, ...] = ()
        if resume is None and not config.overwrite:
            directory.refuse_if_taken()
        elif resume is None:
            held, moved = directory.describe_run(), directory.move_aside()
            if held is not None and moved is not None:
                notes = (f"--overwrite: moved {held[0]} into {moved}/",)
    except BaseException:
        lock.release()
        for path in missing:  # the deepest first; one a check wrote into stays
            try:
                path.rmdir()
            except OSError:
                break
        raise
    return OpenRun(lock, resume, checked, notes)


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, the deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing
