"""The study's worker loop, in one process or ``--jobs`` processes (spawned, never threads).

Each worker fails stale trials, queues the slots given back, takes a free slot, samples its
settings (the sampler reseeded with ``--sampler-seed + trial number``), runs it
(:class:`~ppo_lstm.tune.objective.TrialRunner`) and tells the storage how it ended, until no
slot is left and no other trial runs: while one does, it waits, so the trial of a process that
was killed is run again once its heartbeat goes stale. Several machines running the same
command share the slots the same way. A trial that another process ended meanwhile (it judged
the trial's heartbeat stale) is stopped here, its training run too, in one line, and the
worker goes on with the next slot.
"""
from __future__ import annotations

import multiprocessing
import signal
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Optional

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..config.schema import TrainConfig
from ..distributed import resolve_device, world_size_for
from ..errors import EXIT_SIGINT, EXIT_USAGE, UsageError
from .config import TuneConfig
from .objective import Interrupted, TrialFailed, TrialRunner
from .queue import FAIL_REASON, SLOT, beat, fail_stale, others_running, queue_slots, take_slot
from .space import Space
from .storage import load_existing, make_storage


@dataclass(frozen=True)
class Job:
    """What every worker process needs (picklable, for spawned processes)."""

    base: TrainConfig
    tune: TuneConfig
    space: Space
    url: str
    periods_per_year: float


IDLE_POLL_S = 1.0  # how often a process with no free slot looks again while other trials run


def make_sampler(tune: TuneConfig, number: int) -> optuna.samplers.BaseSampler:
    seed = tune.sampler_seed + number
    if tune.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=tune.startup_trials, constant_liar=True)


def make_pruner(tune: TuneConfig) -> optuna.pruners.BasePruner:
    if tune.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=tune.startup_trials)
    if tune.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def _interrupt(signum: int, _frame: Optional[FrameType]) -> None:
    raise Interrupted(signum)


def work(job: Job, worker: int = 0) -> int:
    """Run trials until no slot is left; returns the exit code (130/143 when interrupted)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    tune = job.tune
    try:
        study = load_existing(make_storage(job.url), tune.study_name, job.url)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    study.pruner = make_pruner(tune)
    world_size = world_size_for(job.base, resolve_device(job.base.device))
    runner = TrialRunner(study, job.base, job.space, tune.out, tune.seeds, tune.metric, tune.heartbeat,
                         job.periods_per_year, world_size)
    try:
        while True:
            fail_stale(study, tune.heartbeat)
            queue_slots(study, tune.trials)
            frozen = take_slot(study, tune.trials)
            if frozen is None:
                if not others_running(study, tune.trials):
                    return 0
                # A killed process's trial comes back once its beat is stale; a trial that ends
                # lets this process return within a second.
                time.sleep(min(tune.heartbeat, IDLE_POLL_S))
                continue
            run_trial(study, frozen, runner, tune, worker)
    except Interrupted as stop:
        return 128 + (stop.args[0] if stop.args else signal.SIGINT)


def run_trial(study: optuna.Study, frozen: FrozenTrial, runner: TrialRunner, tune: TuneConfig, worker: int) -> None:
    """Run the trial this process took (:func:`~ppo_lstm.tune.queue.take_slot`), tell the
    storage how it ended and print one line."""
    tic = time.perf_counter()
    try:
        outcome = _run_one(study, frozen, runner, tune)
    except optuna.exceptions.UpdateFinishedTrialError:
        outcome = _ended_elsewhere(study, frozen)
    print(f"trial {frozen.number} (slot {frozen.user_attrs[SLOT]}, process {worker}): {outcome} "
          f"[{time.perf_counter() - tic:.1f} s]", flush=True)


def _run_one(study: optuna.Study, frozen: FrozenTrial, runner: TrialRunner, tune: TuneConfig) -> str:
    """How the trial ended; UpdateFinishedTrialError when another process ended it first."""
    beat(study, frozen._trial_id, tune.heartbeat)
    study.sampler = make_sampler(tune, frozen.number)
    study.sampler.before_trial(study, frozen)
    trial = optuna.trial.Trial(study, frozen._trial_id)
    try:
        value = runner.run(trial)
    except optuna.TrialPruned:
        _tell(study, trial, state=TrialState.PRUNED)
        return "pruned"
    except TrialFailed as err:
        trial.set_user_attr(FAIL_REASON, str(err))
        _tell(study, trial, state=TrialState.FAIL)
        return f"failed: {err}"
    except Interrupted:
        try:
            _tell(study, trial, state=TrialState.FAIL)  # no fail_reason: its slot is queued again
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # already ended elsewhere: its slot is queued again all the same
        print(f"trial {trial.number}: interrupted; its slot is queued again", flush=True)
        raise
    _tell(study, trial, value)
    return f"score {value:.4g}"


def _tell(study: optuna.Study, trial: optuna.trial.Trial, value: Optional[float] = None,
          state: Optional[TrialState] = None) -> None:
    """``study.tell``; UpdateFinishedTrialError (not Optuna's ValueError) when the trial was
    ended elsewhere before this."""
    try:
        study.tell(trial, value, state=state)
    except ValueError:
        if study._storage.get_trial(trial._trial_id).state.is_finished():  # noqa: SLF001
            raise optuna.exceptions.UpdateFinishedTrialError(f"trial {trial.number} has already finished") \
                from None
        raise


def _ended_elsewhere(study: optuna.Study, frozen: FrozenTrial) -> str:
    ended = study._storage.get_trial(frozen._trial_id)  # noqa: SLF001
    if ended.state == TrialState.FAIL and FAIL_REASON not in ended.user_attrs:
        return ("stopped: another process marked the trial failed, its heartbeat looking stale; "
                "its slot is queued again")
    return f"stopped: another process ended the trial ({ended.state.name})"


def run_jobs(job: Job) -> int:
    """``--jobs`` worker processes (one runs here when it is 1); the worst exit code."""
    if job.tune.jobs == 1:
        return work(job)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_spawned, args=(job, k)) for k in range(job.tune.jobs)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        for process in processes:
            process.join()
        return EXIT_SIGINT
    return max((p.exitcode or 0 for p in processes), key=abs)


def _spawned(job: Job, worker: int) -> None:
    sys.exit(work(job, worker))
