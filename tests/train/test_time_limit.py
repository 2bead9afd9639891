"""--time-limit: a run ends cleanly at its wall-clock budget, on one rank or on two, and --resume goes on."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import SPAWN2, TINY, cli_in_process, run_cli

from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import UsageError
from ppo_lstm.rundir.checkpoint import CheckpointDir
from ppo_lstm.train.agreement import RankReport, agreement_row, read_agreement
from ppo_lstm.config.values import limit_seconds
from ppo_lstm.config.plan import BatchPlan
from ppo_lstm.config.schedule import schedules_at
from ppo_lstm.train.time_limit import LimitProjection, stop_note

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


def test_where_a_stop_leaves_the_schedules():
    config = TrainConfig(episodes=1000, cost_warmup=0.5)  # episodes of 128 bars
    plan = BatchPlan.of(config)

    def at(episodes: int) -> tuple[float, float]:  # a stop after full-length episodes
        return tuple(schedules_at(config, plan, episodes * 128, episodes))

    assert at(100) == (0.2, 0.9) and at(500) == (1.0, 0.5) and at(1000) == (1.0, 0.0)
    assert schedules_at(TrainConfig(episodes=1000, cost_warmup=0.0, anneal_lr=False), plan, 12_800, 100) == (1.0, 1.0)
    assert stop_note(config, plan, 100, 12_800) == (
        " with the training envs' costs at 20% of --fee-bps/--slippage-bps (full from episode 500) and the "
        "learning rates at 90% of their start (annealed to 0 at episode 1,000)")
    assert stop_note(config, plan, 990, 990 * 128) == ""  # costs full, rates under 5 %: nothing left to say
    assert stop_note(config, plan, 400, 12_800).startswith(" with the training envs' costs at 80%")  # short episodes


def test_the_projection_warns_once_where_the_limit_cuts_the_schedules():
    config = TrainConfig(episodes=1000, cost_warmup=0.5, time_limit="10s")  # episodes of 128 bars, 64 envs
    plan = BatchPlan.of(config)
    projection = LimitProjection(config, plan, 10.0, 0, 0)
    assert projection.check(0.5, 10_000) is None  # before a tenth of the limit: not looked yet
    warning = projection.check(1.0, 1_280)  # 1,280 env-steps/s: 100 episodes in 10 s
    assert warning is not None and warning.startswith(
        "warning: at 1,280 env-steps/s, --time-limit 10s stops this run near episode 100 of 1,000, with the training "
        "envs' costs at 20% of --fee-bps/--slippage-bps")
    assert "give --episodes 64 or fewer" in warning  # whole rounds of the 64 envs' episodes
    assert projection.check(2.0, 1_280) is None  # once
    fast = LimitProjection(config, plan, 10.0, 0, 0)
    assert fast.check(1.0, 12_800) is None  # 1,000 episodes fit: no warning
    late = LimitProjection(config, plan, 10.0, 0, 0)
    only_rates = late.check(1.0, 6_400)  # 500 episodes: costs full, rates at half
    assert only_rates is not None and "envs' costs" not in only_rates and "part of the costs" not in only_rates
    assert "the learning rates at 50% of their start" in only_rates and "give --episodes 448 or fewer" in only_rates
    plain = TrainConfig(episodes=1000, cost_warmup=0.0, anneal_lr=False, time_limit="10s")
    assert LimitProjection(plain, BatchPlan.of(plain), 10.0, 0, 0).check(1.0, 1_280) is None  # no schedule to cut


def test_any_ranks_clock_stops_every_rank():
    empty = np.zeros((0, 6))
    rows = torch.stack([agreement_row(RankReport(empty, 4)), agreement_row(RankReport(empty, 4, time_up=True))])
    assert read_agreement(rows, 4).time_up and not read_agreement(rows[:1], 4).time_up


def test_the_run_stops_at_its_budget_with_a_checkpoint_and_resume_goes_on(tmp_path: Path):
    first = cli_in_process(tmp_path, *TINY, "--episodes", "1000000", "--checkpoint-interval", "1000000",
                           "--time-limit", "1s")
    assert first.returncode == 0, first.stderr
    log = (tmp_path / "training.log").read_text()
    assert "Time limit reached (--time-limit 1s): stopped at episode " in log and "--resume goes on" in log
    assert "Last checkpoint: " in first.stdout + log
    # a million episodes' schedules cannot finish in 1s: the run said so early, and where it stopped them
    assert "--time-limit 1s stops this run near episode " in log and "give --episodes " in log
    assert re.search(r"stopped at episode \d+ of 1000000 with the training envs' costs at \d+% of "
                     r"--fee-bps/--slippage-bps \(full from episode 500,000\)", log)
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
