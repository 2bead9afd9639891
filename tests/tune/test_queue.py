"""The slot queue under races between processes, on one real SQLite file opened by two
storages (as two worker processes do): a slot's trial runs in one process only; a trial is
stale only when its own heartbeat is old; and a process whose trial another one ended stops
it, its training run too, in one line, and goes on."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import event

from ppo_lstm.tune import storage as storage_module
from ppo_lstm.tune.config import TuneConfig
from ppo_lstm.tune.queue import (BEAT_EVERY, FAIL_REASON, HEARTBEAT, SLOT, STALE_BEATS, beat, fail_stale,
                                 queue_slots, take_slot)
from ppo_lstm.tune.runner import run_trial
from tune_fixtures import start_tune, trials_of, wait_until, write_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def two_processes(tmp_path: Path, slots: int = 2,
                  busy_timeout_s: float | None = None) -> tuple[str, optuna.Study, optuna.Study]:
    """The study of ``slots`` queued slots in one SQLite file, opened twice, as by two processes
    (the second waits ``busy_timeout_s`` at most for a lock, when given)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first, _ = storage_module.open_study(storage_module.make_storage(url), "study", url)
    queue_slots(first, slots)
    if busy_timeout_s is not None:
        previous, storage_module.SQLITE_BUSY_TIMEOUT_S = storage_module.SQLITE_BUSY_TIMEOUT_S, busy_timeout_s
    try:
        second = storage_module.load_existing(storage_module.make_storage(url), "study", url)
    finally:
        if busy_timeout_s is not None:
            storage_module.SQLITE_BUSY_TIMEOUT_S = previous
    return url, first, second


def test_two_processes_never_take_the_same_slot(tmp_path: Path) -> None:
    """The second process takes a slot while the first has read slot 0's trial WAITING and is
    about to move it to RUNNING (the CI failure: both got trial 0, ran it in the same run dir,
    and one failed it under the other). The second must take another slot, or wait."""
    url, first, second = two_processes(tmp_path, busy_timeout_s=0.2)
    taken_by_second: list[Any] = []

    def between_read_and_write(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE TRIALS") and not taken_by_second:
            try:
                taken_by_second.append(take_slot(second, 2))
            except optuna.exceptions.StorageInternalError as err:  # it waits for the first's lock
                assert "locked" in str(err.__cause__), err.__cause__
                taken_by_second.append(None)

    engine = first._storage._backend.engine  # noqa: SLF001 - only to step in between the two statements
    event.listen(engine, "before_cursor_execute", between_read_and_write)
    try:
        mine = take_slot(first, 2)
    finally:
        event.remove(engine, "before_cursor_execute", between_read_and_write)
    assert mine is not None and taken_by_second, "the second process never tried"
    theirs = taken_by_second[0] or take_slot(second, 2)  # once the first's lock is released
    assert theirs is not None
    assert mine.number != theirs.number, f"both processes run trial {mine.number}"
    assert {mine.user_attrs[SLOT], theirs.user_attrs[SLOT]} == {0, 1}
    assert [t.state for t in trials_of(url, "study")] == [TrialState.RUNNING] * 2
    assert take_slot(first, 2) is None and take_slot(second, 2) is None


def test_a_trial_is_stale_only_when_its_own_heartbeat_is_old(tmp_path: Path) -> None:
    _, first, second = two_processes(tmp_path, slots=3)
    a, b, c = (take_slot(first, 3) for _ in range(3))
    assert a is not None and b is not None and c is not None
    beat(first, a._trial_id, every=10.0)  # just beat
    beat(first, b._trial_id, every=10.0)  # beats 10 s apart, silent 30 s: stale by the judge's 1 s, not by its own
    first._storage.set_trial_user_attr(b._trial_id, HEARTBEAT, time.time() - 30.0)  # noqa: SLF001
    beat(first, c._trial_id, every=0.5)  # silent for twice its 6 beats of 0.5 s and the judge's of 1 s
    first._storage.set_trial_user_attr(c._trial_id, HEARTBEAT, time.time() - 2 * STALE_BEATS)  # noqa: SLF001
    assert first.trials[b.number].user_attrs[BEAT_EVERY] == 10.0
    assert fail_stale(second, 1.0) == [c.number]
    states = {t.number: t.state for t in second.get_trials(deepcopy=False)}
    assert states == {a.number: TrialState.RUNNING, b.number: TrialState.RUNNING, c.number: TrialState.FAIL}
    assert queue_slots(second, 3) == 1  # the stale trial's slot comes back


class EndedElsewhere:
    """A trial runner whose trial another process ends while it runs (``how``); then the
    runner reports a backtest, or finishes with a score."""

    def __init__(self, other: optuna.Study, how: Callable[[optuna.Study, int], None], then: str) -> None:
        self.other, self.how, self.then = other, how, then

    def run(self, trial: optuna.trial.Trial) -> float:
        self.how(self.other, trial._trial_id)
        if self.then == "report":
            trial.report(1.0, step=4)
        return 1.0


def stale(other: optuna.Study, trial_id: int) -> None:
    other._storage.set_trial_user_attr(trial_id, HEARTBEAT, time.time() - 3600)  # noqa: SLF001
    assert fail_stale(other, 1.0)


def failed_in_another_run(other: optuna.Study, trial_id: int) -> None:
    other._storage.set_trial_user_attr(trial_id, FAIL_REASON, "training exited with code 2")  # noqa: SLF001
    other._storage.set_trial_state_values(trial_id, TrialState.FAIL)  # noqa: SLF001


@pytest.mark.parametrize("then", ["report", "finish"])
@pytest.mark.parametrize("how, shown", [(stale, "marked the trial failed, its heartbeat looking stale"),
                                        (failed_in_another_run, "ended the trial (FAIL)")])
def test_a_trial_ended_by_another_process_stops_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            how: Callable[[optuna.Study, int], None], shown: str,
                                                            then: str) -> None:
    url, first, second = two_processes(tmp_path)
    frozen = take_slot(first, 2)
    assert frozen is not None
    run_trial(first, frozen, EndedElsewhere(second, how, then), TuneConfig(out=str(tmp_path)), 1)  # no raise
    lines = capsys.readouterr().out.splitlines()
    assert lines == [lines[0]] and lines[0].startswith(f"trial {frozen.number} (slot 0, process 1): stopped: "), lines
    assert shown in lines[0]
    assert [t.state for t in trials_of(url, "study")] == [TrialState.FAIL, TrialState.WAITING]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_running_trial_failed_by_another_process_stops_its_training(tmp_path: Path) -> None:
    """The CI failure's other half, in a real tuning process: another process fails the trial
    it trains; it stops the training run (no process left), prints one line, exits 0."""
    space = write_space(tmp_path / "space.yaml", "learning-rate-actor: {log-uniform: [1e-4, 1e-2]}\n")
    run = start_tune(tmp_path, "--out", "study", "--space", space, "--trials", "1", "--heartbeat", "1",
                     "--episodes", "400")  # minutes of training: stopped long before it ends
    wait_until(lambda: (tmp_path / "study" / "trial-0000" / "metrics.csv").exists(), 120, "the trial's training")
    url = f"sqlite:///{tmp_path / 'study' / 'study.db'}"
    other = storage_module.load_existing(storage_module.make_storage(url), "study", url)
    failed_in_another_run(other, other.trials[0]._trial_id)
    result = run.wait(120)  # and no process of it is left: its training run was stopped
    assert result.returncode == 0, result.output
    assert "Traceback" not in result.output and "UpdateFinishedTrialError" not in result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("trial ")]
    assert len(lines) == 1 and lines[0].startswith("trial 0 (slot 0, process 0): stopped: another process ended "
                                                   "the trial (FAIL)"), result.stdout
    assert result.seconds < 100
