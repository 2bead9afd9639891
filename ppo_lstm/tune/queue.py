"""The study's trials as a queue of numbered slots, shared by every process and machine.

``--trials N`` means N slots, ``0..N-1``, each a WAITING trial with user attribute ``slot``.
A process takes a slot by moving its trial from WAITING to RUNNING, which the storage does
for one process only (a database row update; an entry of the journal), so each slot runs
once, whichever process takes it, and together the processes run exactly N trials.

The creator of a study queues its slots; a later command with a larger ``--trials`` queues
the missing ones. Should two processes queue the same slot at once, the WAITING trial with
the lower number is the slot's; the other stays WAITING and never runs.

A running trial beats (user attribute ``heartbeat``, a Unix time) every ``--heartbeat``
seconds, and records that interval (``beat_every``) with its first beat. One silent for
:data:`STALE_BEATS` of its own beats, or of the looking process's if those are longer (its
process was killed), is marked FAIL, and so is one whose process was interrupted; such a FAIL
has no ``fail_reason`` attribute, and its slot is queued again as a new WAITING trial with the
same parameters (``retry_of`` = the failed trial's number), by whichever process looks next.
A trial that failed on its own (bad settings, non-finite updates) has a ``fail_reason`` and
keeps its slot: the study goes on without it. Should a process that was only slow find its
trial failed so, it stops the trial's training and goes on (:mod:`~ppo_lstm.tune.runner`).
"""
from __future__ import annotations

import time
from typing import Optional

import optuna
from optuna.trial import FrozenTrial, TrialState

SLOT, RETRY_OF, HEARTBEAT, BEAT_EVERY, FAIL_REASON = "slot", "retry_of", "heartbeat", "beat_every", "fail_reason"
STALE_BEATS = 6


def _slot(trial: FrozenTrial) -> Optional[int]:
    value = trial.user_attrs.get(SLOT)
    return value if isinstance(value, int) else None


def _given_back(trial: FrozenTrial) -> bool:
    """A FAIL that is no verdict on its settings: its process was killed or interrupted."""
    return trial.state == TrialState.FAIL and FAIL_REASON not in trial.user_attrs


def taken_slots(trials: list[FrozenTrial]) -> set[int]:
    """Slots whose trial runs or ran to a verdict."""
    return {s for t in trials if (s := _slot(t)) is not None and t.state != TrialState.WAITING
            and not _given_back(t)}


def queue_slots(study: optuna.Study, n: int) -> int:
    """Queue every slot below ``n`` that no trial holds or waits for (a slot given back is
    queued with its last trial's parameters); returns how many were queued."""
    trials = study.get_trials(deepcopy=False)
    held = taken_slots(trials) | {s for t in trials if (s := _slot(t)) is not None and t.state == TrialState.WAITING}
    back = {_slot(t): t for t in sorted(trials, key=lambda t: t.number) if _given_back(t)}
    queued = 0
    for k in range(n):
        if k in held:
            continue
        previous = back.get(k)
        if previous is None:
            study.enqueue_trial({}, user_attrs={SLOT: k})
        else:
            study.enqueue_trial(dict(previous.params), user_attrs={SLOT: k, RETRY_OF: previous.number})
        queued += 1
    return queued


def take_slot(study: optuna.Study, n: int) -> Optional[FrozenTrial]:
    """Move the first free slot's WAITING trial (slot < ``n``) to RUNNING for this process;
    None when no slot is left."""
    trials = study.get_trials(deepcopy=False)
    taken = taken_slots(trials)
    owners: dict[int, FrozenTrial] = {}
    for t in trials:
        s = _slot(t)
        if t.state == TrialState.WAITING and s is not None and s < n and s not in taken and s not in owners:
            owners[s] = t  # the lowest-numbered WAITING trial of a slot is the slot's
    storage = study._storage  # noqa: SLF001 - the state change is the storage's own atomic operation
    for slot in sorted(owners):
        trial = owners[slot]
        try:
            if storage.set_trial_state_values(trial._trial_id, state=TrialState.RUNNING):
                return storage.get_trial(trial._trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return None


def others_running(study: optuna.Study, n: int) -> bool:
    """Whether a trial of a slot below ``n`` is RUNNING: in another process, or in a killed one
    whose heartbeat has not gone stale yet (its slot then comes back to the queue)."""
    return any((s := _slot(t)) is not None and s < n
               for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def beat(study: optuna.Study, trial_id: int, every: Optional[float] = None) -> None:
    """Record that the trial is alive now (and, given ``every``, how many seconds apart its
    beats are); UpdateFinishedTrialError when another process has ended it meanwhile."""
    storage = study._storage  # noqa: SLF001
    if every is not None:
        storage.set_trial_user_attr(trial_id, BEAT_EVERY, float(every))
    storage.set_trial_user_attr(trial_id, HEARTBEAT, time.time())


def _silent_for(trial: FrozenTrial, now: float) -> float:
    """Seconds since the trial's last beat (since it started, before its first beat)."""
    last = trial.user_attrs.get(HEARTBEAT)
    if isinstance(last, (int, float)):
        return now - last
    return now - trial.datetime_start.timestamp() if trial.datetime_start is not None else 0.0


def _stale(trial: FrozenTrial, interval: float, now: float) -> bool:
    every = trial.user_attrs.get(BEAT_EVERY)
    every = max(interval, every) if isinstance(every, (int, float)) else interval
    return _silent_for(trial, now) > STALE_BEATS * every


def fail_stale(study: optuna.Study, interval: float) -> list[int]:
    """Mark FAIL every RUNNING trial silent for more than ``STALE_BEATS`` beats (``interval``
    seconds each, or the trial's own ``beat_every`` if longer); its slot is queued again by
    :func:`queue_slots`. Returns their numbers."""
    failed = []
    storage = study._storage  # noqa: SLF001
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _stale(t, interval, time.time()):
            continue
        latest = storage.get_trial(t._trial_id)  # read again: it may have beaten since the list was read
        if latest.state != TrialState.RUNNING or not _stale(latest, interval, time.time()):
            continue
        try:
            if storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                failed.append(t.number)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process failed it first
    return failed
