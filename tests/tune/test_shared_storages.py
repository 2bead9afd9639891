"""Two tune-ppo-lstm processes share one study, through a journal file and through a real
PostgreSQL 15 server: together they run exactly --trials trials, one per slot. A process
killed mid-trial leaves the study readable; the next command fails its trial and runs its
slot again with the same settings."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Iterator

import pytest
from optuna.trial import TrialState

from conftest import assert_no_process_left
from ppo_lstm.tune.queue import FAIL_REASON, RETRY_OF
from tune_fixtures import Postgres, assert_exactly, postgres_server, start_tune, trials_of, wait_until, write_space

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SPACE = "learning-rate-actor: {log-uniform: [1e-4, 1e-2]}\n"


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    yield from postgres_server()


def two_processes(tmp_path: Path, url: str, trials: int = 3) -> None:
    space = write_space(tmp_path / "space.yaml", SPACE)
    args = ["--storage", url, "--study-name", "shared", "--space", space, "--trials", str(trials),
            "--sampler", "random"]
    runs = [start_tune(tmp_path / f"machine-{k}", "--out", "study", *args) for k in range(2)]
    results = [run.wait(240) for run in runs]
    for result in results:
        assert result.returncode == 0, result.output
    trials_run = trials_of(url, "shared")
    assert_exactly(trials_run, trials)
    assert {t.state for t in trials_run} == {TrialState.COMPLETE}
    ran_here = [sum(line.startswith("trial ") for line in r.stdout.splitlines()) for r in results]
    assert sum(ran_here) == trials, ran_here


def test_journal_file_two_processes(tmp_path: Path) -> None:
    two_processes(tmp_path, f"journal:{tmp_path / 'shared' / 'journal.log'}")


def test_postgresql_two_processes(tmp_path: Path, postgres: Postgres) -> None:
    two_processes(tmp_path, postgres.url)


def test_a_killed_process_leaves_a_trial_that_runs_again(tmp_path: Path) -> None:
    space = write_space(tmp_path / "space.yaml", SPACE)
    url = f"journal:{tmp_path / 'journal.log'}"
    # beats 1 s apart: the rerun below starts before the killed trial goes stale (6 beats), and must wait for it;
    # 200 episodes, not the fixtures' 8: a trial of 8 can end before the kill lands on a fast CPU
    args = ["--out", "study", "--storage", url, "--space", space, "--trials", "1", "--heartbeat", "1",
            "--episodes", "200"]
    run = start_tune(tmp_path, *args)
    wait_until(lambda: (tmp_path / "study" / "trial-0000" / "metrics.csv").exists(), 120, "the first trial's run")
    os.kill(run.pid, signal.SIGKILL)
    run.wait(30, check_processes=False)
    assert_no_process_left(tmp_path)  # its training run died with it
    killed = trials_of(url, "study")
    assert [t.state for t in killed] == [TrialState.RUNNING]

    result = start_tune(tmp_path, *args).wait(240)
    assert result.returncode == 0, result.output
    trials = trials_of(url, "study")
    first = trials[0]
    assert first.state == TrialState.FAIL and FAIL_REASON not in first.user_attrs
    retry = [t for t in trials if t.user_attrs.get(RETRY_OF) == 0]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert retry[0].params == first.params and retry[0].user_attrs["slot"] == 0
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert [t.user_attrs["slot"] for t in done] == [0] and len(trials) == 2
