"""The body of every worker, whichever way it was launched: rank 0 locks the run dir and
resumes or claims it, every rank builds its :class:`Trainer` and trains.

Set-up problems on any rank are agreed on collectively, so a bad input on one rank
stops every rank with exit 2 instead of leaving the others waiting in a collective.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

from ..rundir.checkpoint import CheckpointError
from ..rundir.lock import RunLock
from ..config.command_line import CommandLine, save_run_config
from ..config.resolve import resolve
from ..config.schema import TrainConfig
from ..distributed import Worker, WorkerFailed
from ..errors import EXIT_USAGE, TrainingError, UsageError
from .run_dir import claim_run_dir, find_resume, lock_run
from .shutdown import StopRequest
from .trainer import Trainer


def train_worker(config: TrainConfig, worker: Worker, command: Optional[CommandLine] = None) -> int:
    """The body of every worker, whichever way it was launched. Returns an exit code.

    ``command`` is the parsed command line (default: ``config`` as given, nothing else):
    on ``--resume`` every setting it did not give comes from the checkpoint
    (:func:`~ppo_lstm.config.resolve.resolve`), and its note (which config file was read)
    is a start-up line of rank 0's console and log; rank 0 saves the run's resolved
    settings as ``config.yaml`` once its trainer is built.

    Set-up problems on any rank are agreed on collectively (two fixed collectives,
    whatever fails where), so a bad input on one rank stops every rank with exit 2
    instead of leaving the others waiting in a collective. A failure after that (a full
    disk, repeated non-finite updates) raises :class:`WorkerFailed` after this rank's
    clean-up; the launch code reports it and ends the job, as it does for any other
    exception.
    """
    comm = worker.comm
    command = command or CommandLine(config, frozenset(), False, None)
    config = command.config
    stop = StopRequest()
    stop.install()
    lock: Optional[RunLock] = None
    found: Optional[tuple[str, dict[str, Any]]] = None
    lines: list[str] = []  # rank 0's start-up notes of the run dir (what --overwrite moved)
    failure = ""
    if comm.rank == 0:  # step 1: rank 0 alone locks the run dir, then resumes or claims it
        try:
            lock = lock_run(config)
            found = find_resume(config)
            if found is None:
                lines += claim_run_dir(config)
        except (UsageError, CheckpointError) as err:
            failure = str(err)
    failure, found, lines = comm.gather_objects((failure, found, lines))[0]
    trainer: Optional[Trainer] = None
    if not failure:  # step 2: every rank builds its trainer
        try:
            resolved = resolve(command, comm.world_size, found[1]["config"] if found else None,
                               found[0] if found else "the checkpoint")
            change = resolved.change_line()
            trainer = Trainer(resolved.config, worker, (Path(found[0]), found[1]) if found else None, stop,
                              (*resolved.notes, *lines, *([change] if change else [])), resolved.plan)
            if comm.rank == 0:
                save_run_config(resolved.config)
        except (UsageError, CheckpointError) as err:
            failure = str(err)
        failure = next((f for f in comm.gather_objects(failure) if f), "")
    try:
        if failure:
            if comm.rank == 0:
                print(f"error: {failure}", file=sys.stderr)
            return EXIT_USAGE
        assert trainer is not None
        return trainer.run()
    except (TrainingError, CheckpointError) as err:
        raise WorkerFailed(str(err)) from None
    finally:
        if lock is not None:
            lock.release()
