"""The body of every worker, whichever way it was launched: the run dir is opened (by the
command line before it launched, else by rank 0 here), every rank builds its
:class:`Trainer` and trains.

Set-up problems on any rank are agreed on collectively, so a bad input on one rank
stops every rank with exit 2 instead of leaving the others waiting in a collective.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..rundir.checkpoint import CheckpointError
from ..rundir.lock import RunLock
from ..config.command_line import CommandLine, save_run_config
from ..config.resolve import Resolved, resolve
from ..config.schema import TrainConfig
from ..distributed import Worker, WorkerFailed
from ..errors import EXIT_USAGE, TrainingError, UsageError
from .run_dir import Resume, open_run
from .shutdown import StopRequest
from .trainer import Trainer


@dataclass(frozen=True)
class RunStart:
    """What every worker starts from: the run's settings, the checkpoint it resumes (None for a
    fresh run) and the start-up notes of its run dir (what ``--overwrite`` moved)."""

    resolved: Resolved
    resume: Optional[Resume]
    notes: tuple[str, ...]


def resolve_run(command: CommandLine, world_size: int, resume: Optional[Resume]) -> Resolved:
    """The run's settings: ``command``'s, on a resume under the checkpoint's (the flags given win)."""
    if resume is None:
        return resolve(command, world_size)
    return resolve(command, world_size, resume.state["config"], resume.path)


def train_worker(config: TrainConfig, worker: Worker, command: Optional[CommandLine] = None,
                 start: Optional[RunStart] = None) -> int:
    """The body of every worker, whichever way it was launched. Returns an exit code.

    ``command`` is the parsed command line (default: ``config`` as given, nothing else).
    ``start`` is what the command line checked before it launched, under the run lock it holds
    for its workers; without it (under torchrun, or ``launch()`` from code) rank 0 opens the run
    dir, resolving the settings before it claims the directory, and every other rank resolves
    them on the checkpoint rank 0 sends (:func:`resolve_run`). Rank 0 saves the run's resolved
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
    stop = StopRequest()
    stop.install()
    lock: Optional[RunLock] = None
    failure = ""
    if start is None:  # step 1, where no launcher opened the run: rank 0 locks it, resumes or claims it
        sent: tuple = (failure, None, ())  # plain values: what a collective carries is loaded weights-only
        if comm.rank == 0:
            try:
                run = open_run(command.config, lambda resume: resolve_run(command, comm.world_size, resume))
                lock, start = run.lock, RunStart(run.checked, run.resume, run.notes)
                sent = ("", tuple(run.resume) if run.resume else None, run.notes)
            except (UsageError, CheckpointError) as err:
                sent = (str(err), None, ())
        failure, resume, notes = comm.gather_objects(sent)[0]
    trainer: Optional[Trainer] = None
    if not failure:  # step 2: every rank builds its trainer
        try:
            if start is None:  # a rank that did not open the run resolves the same settings on its own
                resume = Resume(*resume) if resume else None
                start = RunStart(resolve_run(command, comm.world_size, resume), resume, tuple(notes))
            resolved, resume = start.resolved, start.resume
            change = resolved.change_line()
            trainer = Trainer(resolved.config, worker, (Path(resume.path), resume.state) if resume else None, stop,
                              (*resolved.notes, *start.notes, *([change] if change else [])), resolved.plan)
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
