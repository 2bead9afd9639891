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
from ..config.checks import validate
from ..config.command_line import resumed_config, save_run_config
from ..config.schema import TrainConfig
from ..distributed import Worker, WorkerFailed
from ..errors import EXIT_USAGE, TrainingError, UsageError
from .run_dir import claim_run_dir, find_resume, lock_run
from .shutdown import StopRequest
from .trainer import Trainer


def train_worker(config: TrainConfig, worker: Worker, given: frozenset[str] = frozenset(),
                 notes: tuple[str, ...] = ()) -> int:
    """The body of every worker, whichever way it was launched. Returns an exit code.

    ``given`` names the settings the command line (or its ``--config`` file) gave: on
    ``--resume`` every other setting comes from the checkpoint. ``notes`` are start-up
    lines for rank 0's console and log (e.g. which config file was read); rank 0 saves
    the run's resolved settings as ``config.yaml`` once its trainer is built.

    Set-up problems on any rank are agreed on collectively (two fixed collectives,
    whatever fails where), so a bad input on one rank stops every rank with exit 2
    instead of leaving the others waiting in a collective. A failure after that (a full
    disk, repeated non-finite updates) raises :class:`WorkerFailed` after this rank's
    clean-up; the launch code reports it and ends the job, as it does for any other
    exception.
    """
    comm = worker.comm
    stop = StopRequest()
    stop.install()
    lock: Optional[RunLock] = None
    found: Optional[tuple[str, dict[str, Any]]] = None
    lines: list[str] = list(notes)
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
            if found is not None:
                config, changes = resumed_config(config, given, found[1]["config"])
                validate(config, comm.world_size)
                lines.append(f"Settings changed on resume: {', '.join(changes)}" if changes
                             else "Settings: as in the checkpoint")
            trainer = Trainer(config, worker, (Path(found[0]), found[1]) if found else None, stop, tuple(lines))
            if comm.rank == 0:
                save_run_config(config)
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
