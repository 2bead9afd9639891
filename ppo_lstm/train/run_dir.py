"""A training run's hold on its --checkpoint-dir: the run lock, the checkpoint ``--resume``
starts from, and a fresh run's claim on the directory (refused while it holds a run,
unless ``--overwrite``, which moves that run aside).

The command line checks all of this before any worker starts (:func:`check_run_dir`)
and, for spawned workers, holds the lock itself (:func:`hold_lock_for_workers`); rank 0
of the workers then locks, resumes or claims for real (:func:`lock_run`,
:func:`find_resume`, :func:`claim_run_dir`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

from ..config.schema import TrainConfig
from ..rundir.checkpoint import CheckpointDir
from ..rundir.lock import RunLock

LOCK_HELD_VARIABLE = "PPO_LSTM_LOCK_HELD"  # set by a launcher that holds the run lock itself


def newest_checkpoint(config: TrainConfig) -> tuple[Path, dict[str, Any], list[str]]:
    """``--resume``: the newest valid checkpoint in --checkpoint-dir, its state, and a line
    for each newer file skipped as unreadable (UsageError when none is valid)."""
    return CheckpointDir(config.checkpoint_dir, config.keep_checkpoints).load_newest_valid()


def find_resume(config: TrainConfig) -> Optional[tuple[str, dict[str, Any]]]:
    """With --resume, the newest valid checkpoint (path, state), warning on stderr about the
    files skipped; None without --resume."""
    if not config.resume:
        return None
    path, state, skipped = newest_checkpoint(config)
    for line in skipped:
        print(f"warning: {line}; falling back to an older checkpoint", file=sys.stderr)
    return str(path), state


def check_run_dir(config: TrainConfig) -> None:
    """Before any worker starts: UsageError if a live run holds the directory's lock, or if a
    fresh run (no --resume, no --overwrite) would write over a run the directory holds."""
    with RunLock(config.checkpoint_dir):  # a live run's directory: say that, not what it holds
        pass
    if not config.resume and not config.overwrite:
        CheckpointDir(config.checkpoint_dir, config.keep_checkpoints).refuse_if_taken()


def claim_run_dir(config: TrainConfig) -> list[str]:
    """A fresh run's claim on --checkpoint-dir: refused if it holds a run, unless --overwrite,
    which moves that run aside. Returns the start-up notes (what was moved where)."""
    directory = CheckpointDir(config.checkpoint_dir)
    if not config.overwrite:
        directory.refuse_if_taken()
        return []
    held = directory.describe_run()
    moved = directory.move_aside()
    return [f"--overwrite: moved {held[0]} into {moved}/"] if held is not None and moved is not None else []


def lock_run(config: TrainConfig) -> Optional[RunLock]:
    """Lock the checkpoint dir, unless the launching process already holds the lock."""
    if os.environ.get(LOCK_HELD_VARIABLE) == "1":
        return None
    lock = RunLock(config.checkpoint_dir)
    lock.acquire()
    return lock


def hold_lock_for_workers(config: TrainConfig) -> RunLock:
    """The launcher's lock on the checkpoint dir, held for the workers it spawns (which then
    skip :func:`lock_run`); give it back with :func:`release_lock_for_workers`."""
    lock = RunLock(config.checkpoint_dir)
    lock.acquire()
    os.environ[LOCK_HELD_VARIABLE] = "1"
    return lock


def release_lock_for_workers(lock: RunLock) -> None:
    """Give back :func:`hold_lock_for_workers`'s lock."""
    lock.release()
    os.environ.pop(LOCK_HELD_VARIABLE, None)
