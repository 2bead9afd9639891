"""Crash-safe checkpoints: atomic writes, safe loads, rotation, ``best.pt`` and a run lock.

A checkpoint is a dict of plain containers and tensors only (numpy arrays are
stored as tensors), so it loads with ``torch.load(..., weights_only=True)``: a
crafted pickle cannot run code.

Every file is written to a temporary file created exclusively (``tempfile.mkstemp``: a
random name, ``O_EXCL``, so a planted file or symlink is never followed) in the same
directory, fsynced, then ``os.replace``-d into place (and the directory fsynced), so a kill
at any moment leaves the previous checkpoint and the ``latest`` pointer intact.
"""
from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..config.migrate import migrate_checkpoint
from ..errors import UsageError
from .atomic import (BEST_NAME, CHECKPOINT_PATTERN, LATEST_NAME, METRICS_NAME, OWN_TEMP_PATTERN,
                     PREVIOUS_PREFIX, RUN_CONFIG_NAME, RUN_LOG_NAME, TENSORBOARD_NAME, CheckpointError, _fsync_dir,
                     atomic_write_bytes)

_NDARRAY_TAG = "__ndarray__"

# ------------------------------------------------------------------ safe containers


def to_safe(obj: Any) -> Any:
    """Replace numpy arrays and scalars (recursively) by tensors and python scalars."""
    if isinstance(obj, np.ndarray):
        return {_NDARRAY_TAG: torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {key: to_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_safe(value) for value in obj)
    return obj


def on_cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it (recursively, through dicts, lists and tuples) on
    the CPU: a checkpoint written on a GPU (fused Adam keeps its state there) must load
    with a plain ``torch.load`` on a machine without CUDA."""
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {key: on_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(on_cpu(value) for value in obj)
    return obj


def from_safe(obj: Any) -> Any:
    """Inverse of :func:`to_safe`: tagged tensors become numpy arrays again."""
    if isinstance(obj, dict):
        if set(obj) == {_NDARRAY_TAG}:
            return obj[_NDARRAY_TAG].numpy()
        return {key: from_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(from_safe(value) for value in obj)
    return obj


def atomic_save(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` ``state`` to ``path`` atomically."""
    atomic_write_bytes(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``) onto the CPU.

    Raises :class:`CheckpointError` naming the file when it is missing, truncated,
    corrupt, or holds anything but tensors and plain containers. A checkpoint of an earlier
    format comes back in this one (:func:`~ppo_lstm.config.migrate.migrate_checkpoint`); one
    of a newer format is a :class:`UsageError`.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint file not found") from None
    except Exception as err:  # noqa: BLE001 - torch raises many types for bad files
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: not a valid checkpoint ({reason[:200]})") from None
    if not isinstance(state, dict) or "model" not in state or "counters" not in state:
        raise CheckpointError(f"{path}: not a ppo-lstm-trader checkpoint (no model/counters)")
    return migrate_checkpoint(state, str(path))


# ------------------------------------------------------------------ the directory


def update_of(path: Path) -> int:
    """The update number in a checkpoint file's name."""
    match = CHECKPOINT_PATTERN.match(path.name)
    assert match is not None, path
    return int(match.group(1))


def peek_run_id(path: Path) -> Optional[str]:
    """The ``run_id`` stored in a checkpoint (None for an unreadable or pre-run-id file).

    Memory-maps the file, so the tensors are not read."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - any unreadable file is simply nobody's
        return None
    return state.get("run_id") if isinstance(state, dict) else None


class CheckpointDir:
    """The run directory: ``checkpoint_uNNNNNNNN.pt`` files, ``latest``, ``best.pt``,
    ``config.yaml``, ``metrics.csv``, ``training.log`` and ``tb/``, all belonging to one run.

    Rotation only ever deletes checkpoints of this run: the ones :meth:`save` wrote,
    plus those :meth:`adopt` found carrying the resumed run's ``run_id``.
    """

    def __init__(self, directory: str | os.PathLike, keep: int = 3) -> None:
        self.path = Path(directory)
        self.keep = keep
        self._own: list[Path] = []

    def checkpoints(self) -> list[Path]:
        """Checkpoint files, newest (highest update) first."""
        if not self.path.is_dir():
            return []
        found = [p for p in self.path.iterdir() if CHECKPOINT_PATTERN.match(p.name)]
        return sorted(found, key=update_of, reverse=True)

    def adopt(self, run_id: str, resumed_from: Optional[Path] = None) -> None:
        """Count as this run's own (for rotation) the checkpoints here that carry ``run_id``,
        and ``resumed_from`` (a checkpoint of an older format may carry none)."""
        self._own = [p for p in self.checkpoints() if p == resumed_from or peek_run_id(p) == run_id]

    def save(self, state: dict[str, Any], update: int, is_best: bool) -> Path:
        """Write ``state`` as the checkpoint of ``update``, point ``latest`` at it, copy it to
        ``best.pt`` if ``is_best``, and drop this run's checkpoints beyond the newest ``keep``."""
        self.path.mkdir(parents=True, exist_ok=True)
        path = self.path / f"checkpoint_u{update:08d}.pt"
        atomic_save(state, path)
        atomic_write_bytes(self.path / LATEST_NAME, lambda handle: handle.write(path.name.encode() + b"\n"))
        if is_best:
            atomic_save(state, self.path / BEST_NAME)
        self._own = sorted({*self._own, path}, key=update_of, reverse=True)
        for old in self._own[self.keep:]:
            old.unlink(missing_ok=True)
        self._own = self._own[: self.keep]
        return path

    def run_files(self) -> list[Path]:
        """The files of a run in this directory: checkpoint files, ``latest``, ``best.pt``,
        ``config.yaml``, ``metrics.csv``, ``training.log`` and the ``tb/`` folder (not the lock,
        nor runs moved aside; a folder under a file's name is nobody's run)."""
        if not self.path.is_dir():
            return []
        names = {LATEST_NAME, BEST_NAME, RUN_CONFIG_NAME, METRICS_NAME, RUN_LOG_NAME}
        return sorted(p for p in self.path.iterdir()
                      if (p.is_file() and (p.name in names or CHECKPOINT_PATTERN.match(p.name)))
                      or (p.name == TENSORBOARD_NAME and p.is_dir()))

    def describe_run(self) -> Optional[tuple[str, bool]]:
        """None when no run's files are here, else a short description of the run they hold
        and whether it has a valid checkpoint to resume from."""
        files = self.run_files()
        if not files:
            return None
        try:
            _, state, _ = self.load_newest_valid()
        except UsageError:
            return f"files of an earlier run ({', '.join(p.name for p in files[:4])})", False
        counters, config = state["counters"], state.get("config", {})
        return (f"a run at episode {counters['global_episodes']}/{config.get('episodes', '?')}, "
                f"update {counters['update']}"), True

    def refuse_if_taken(self) -> None:
        """UsageError when this directory already holds a run (a new run must not touch it)."""
        held = self.describe_run()
        if held is not None:
            what, resumable = held
            resume = "pass --resume to continue it, " if resumable else ""
            raise UsageError(
                f"--checkpoint-dir {self.path} already holds {what}; {resume}choose another --checkpoint-dir "
                f"for a new run, or pass --overwrite to move it into {self.path / PREVIOUS_PREFIX}<timestamp>/ "
                f"and start afresh")

    def move_aside(self) -> Optional[Path]:
        """Move a previous run's files into ``previous-<timestamp>/`` (nothing is deleted).
        Returns that folder, or None when there was nothing to move."""
        files = self.run_files()
        if not files:
            return None
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        target = self.path / f"{PREVIOUS_PREFIX}{stamp}"
        suffix = 1
        while target.exists():
            suffix += 1
            target = self.path / f"{PREVIOUS_PREFIX}{stamp}-{suffix}"
        target.mkdir()
        for path in files:
            os.replace(path, target / path.name)
        _fsync_dir(self.path)
        return target

    def remove_stale_temp_files(self) -> list[Path]:
        """Delete this project's temp files (:data:`OWN_TEMP_PATTERN`) left by a writer killed
        mid-write; other files are never touched. Call only while holding the run lock
        (then no other process is writing here)."""
        if not self.path.is_dir():
            return []
        stale = [p for p in self.path.iterdir() if OWN_TEMP_PATTERN.match(p.name)]
        for path in stale:
            path.unlink(missing_ok=True)
        return stale

    def latest(self) -> Optional[Path]:
        """The file ``latest`` points at, if it says anything."""
        pointer = self.path / LATEST_NAME
        try:
            name = pointer.read_text().strip()
        except OSError:
            return None
        return self.path / name if CHECKPOINT_PATTERN.match(name) else None

    def load_newest_valid(self) -> tuple[Path, dict[str, Any], list[str]]:
        """The newest checkpoint that loads, and one line per newer file that did not.

        Raises :class:`UsageError` when there is none (``--resume`` never starts fresh).
        """
        candidates: list[Path] = []
        latest = self.latest()
        if latest is not None:
            candidates.append(latest)
        candidates += [p for p in self.checkpoints() if p != latest]
        skipped: list[str] = []
        for path in candidates:
            try:
                return path, load_checkpoint(path), skipped
            except CheckpointError as err:
                skipped.append(str(err))
        if skipped:
            raise UsageError(f"--resume: no valid checkpoint in {self.path} ({'; '.join(skipped)}); "
                             f"remove --resume to start fresh")
        raise UsageError(f"--resume: no checkpoint found in {self.path}; "
                         f"check --checkpoint-dir, or remove --resume to start fresh")

    def check_writable(self, needed_bytes: int) -> None:
        """Fail early (UsageError) if the directory cannot be created or written, or is too full."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write-test.{os.getpid()}"  # matches OWN_TEMP_PATTERN, as its temp does
            atomic_write_bytes(probe, lambda handle: handle.write(b"ok"))
            probe.unlink()
        except (OSError, CheckpointError) as err:
            raise UsageError(f"--checkpoint-dir {self.path} is not writable ({err}); "
                             f"fix its permissions or choose another directory") from None
        free = shutil.disk_usage(self.path).free
        if free < needed_bytes:
            raise UsageError(f"--checkpoint-dir {self.path} has only {free // 1024} KiB free, checkpoints need "
                             f"about {needed_bytes // 1024} KiB; free some space or choose another directory")
