"""--time-limit: a run ends cleanly at its wall-clock budget, on one rank or on two, and --resume goes on."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import SPAWN2, TINY, cli_in_process, run_cli

from ppo_lstm.errors import UsageError
from ppo_lstm.rundir.checkpoint import CheckpointDir
from ppo_lstm.train.agreement import agreement_row, read_agreement
from ppo_lstm.train.time_limit import limit_seconds

import numpy as np
import torch


def test_durations_and_bad_values():
    assert [limit_seconds(t) for t in ("600", "90s", "10min", "1h30m", "2 hours", "0.5")] == [
        600.0, 90.0, 600.0, 5400.0, 7200.0, 0.5]
    assert limit_seconds(None) is None
    for bad in ("0", "-5s", "soon", "nan", "1 fortnight"):
        with pytest.raises(UsageError, match="--time-limit takes a positive duration"):
            limit_seconds(bad)


def test_a_bad_time_limit_is_one_line_and_exit_2(tmp_path: Path):
    result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--time-limit", "soon")
    assert result.returncode == 2 and result.error_lines() == [
        "error: --time-limit takes a positive duration such as 90s, 10min or 1h30m (a bare number is seconds), "
        "got 'soon'"]


def test_any_ranks_clock_stops_every_rank():
    empty = np.zeros((0, 6))
    rows = torch.stack([agreement_row(empty, False, 0, 1.0, 4), agreement_row(empty, False, 0, 1.0, 4, time_up=True)])
    assert read_agreement(rows, 4).time_up and not read_agreement(rows[:1], 4).time_up


def test_the_run_stops_at_its_budget_with_a_checkpoint_and_resume_goes_on(tmp_path: Path):
    first = cli_in_process(tmp_path, *TINY, "--episodes", "1000000", "--checkpoint-interval", "1000000",
                           "--time-limit", "1s")
    assert first.returncode == 0, first.stderr
    log = (tmp_path / "training.log").read_text()
    assert "Time limit reached (--time-limit 1s): stopped at episode " in log and "--resume goes on" in log
    assert "Last checkpoint: " in first.stdout + log
    assert CheckpointDir(tmp_path / "checkpoints").checkpoints()  # written at the stop
    stopped = int(re.search(r"stopped at episode (\d+) of 1000000", log).group(1))
    assert 0 < stopped < 1000000
    again = cli_in_process(tmp_path, "--resume", "--episodes", str(stopped + 8), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert f"Training finished: {stopped + 8} episodes" in (tmp_path / "training.log").read_text()


@pytest.mark.e2e
def test_two_workers_stop_together_at_the_budget(tmp_path: Path):
    result = run_cli(tmp_path, *TINY, *SPAWN2, "--episodes", "1000000", "--checkpoint-interval", "1000000",
                     "--time-limit", "3s", timeout=120)
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "training.log").read_text()
    assert log.count("Time limit reached (--time-limit 3s)") == 1  # rank 0 writes; both ranks stopped
    assert "Training finished: " in log
