"""--train-for: a run whose length is a wall-clock time; its episodes are fitted to it from the
measured speed, agreed by every rank, recorded in its checkpoints, and --resume finishes them."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SPAWN2, TINY, cli_in_process, run_cli

from ppo_lstm.algo.episodes import EpisodeTotals
from ppo_lstm.config.plan import BatchPlan
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.rundir.logger import format_episode_line
from ppo_lstm.rundir.checkpoint import CheckpointDir
from ppo_lstm.train.agreement import RankReport, agreement_row, read_agreement
from ppo_lstm.train.time_limit import FIT_AT, EpisodeFit, TimeBudget, resumed_fit, time_up_line

FIT = re.compile(r"--train-for \S+: at [\d,]+ env-steps/s(?: so far)?, (\d+) episodes fit")


def test_the_fit_measures_after_the_first_iteration_and_proposes_whole_rounds():
    fit = EpisodeFit("100s", 128, 64)  # 128-bar episodes, 64 envs end theirs together
    fit.observe(1.0, 1_000, 0)  # the first iteration: start-up, not measured
    fit.observe(2.0, 11_000, 0)
    assert fit.proposal == 0  # two iterations, and under a twentieth of the time
    fit.observe(5.0, 41_000, 128)  # 40,000 steps in 4 s: 10,000 env-steps/s, 95 s left
    assert fit.speed == 10_000 and not fit.fitted
    # 128 done + 10,000 x 95 / 128 = 7,549.9 episodes: 117 whole rounds of 64
    assert fit.proposal == 7_488
    fit.observe(6.0, 51_000, 128)
    assert fit.proposal == 7_488  # held until every rank has taken it
    assert fit.settle(fit.proposal, 192) == 7_488 and fit.fitted and fit.proposal == 0
    fit.observe(20.0, 151_000, 1_000)  # under a quarter of the time: no refit yet
    assert fit.proposal == 0
    fit.observe(25.0, 241_000, 1_500)  # 240,000 steps in 24 s, 75 s left: 1,500 + 750,000 / 128 = 7,359.4
    assert fit.proposal == 7_296  # 114 rounds
    assert fit.settle(7_296, 1_600) == 7_296 and fit.fits == 2
    assert "fitted again at 25% of the time" in fit.line(7_296, 1_600)


def test_a_proposal_never_ends_the_run_before_one_more_round():
    fit = EpisodeFit("10s", 16, 4)
    assert fit.settle(8, 40) == 44  # 40 counted since the proposal: one more round of 4


def test_the_fits_are_at_the_shares_of_the_time_and_no_more():
    fit = EpisodeFit("10s", 16, 4)
    elapsed = [0.1, 0.2, 0.3] + [share * 10 for share in FIT_AT] + [9.0]
    for i, t in enumerate(elapsed):
        fit.observe(t, 1_000 * (i + 1), 4 * i)
        if fit.proposal:
            fit.settle(fit.proposal, 4 * i)
    assert fit.fits == len(FIT_AT) == 3


def budget(config: TrainConfig, rank: int, world_size: int) -> TimeBudget:
    return TimeBudget(config, BatchPlan.of(config, world_size), rank, 0, 0)


def test_the_budget_stops_at_the_shorter_time_and_warns_only_without_train_for():
    both = budget(TrainConfig(time_limit="1min", train_for="30s"), 0, 1)
    assert both.seconds == 30 and both.projection is None and both.fitting
    assert not both.time_up(29.9) and both.time_up(30.0)
    assert budget(TrainConfig(time_limit="10s", train_for="1h"), 0, 1).seconds == 10
    assert budget(TrainConfig(time_limit="10s"), 0, 1).projection is not None
    assert budget(TrainConfig(time_limit="10s"), 1, 2).projection is None  # rank 0 warns
    plain = budget(TrainConfig(), 0, 1)
    assert plain.seconds is None and not plain.time_up(1e9) and plain.proposal() == 0 and not plain.fitting
    other_rank = budget(TrainConfig(train_for="10s", num_envs=4), 1, 2)
    other_rank.fit.proposal = 64  # only rank 0's proposal goes into the collective
    assert other_rank.proposal() == 0


def test_the_lines_of_a_stop_by_the_clock():
    config = TrainConfig(train_for="30s", episodes=2_000, cost_warmup=0.5)
    plan = BatchPlan.of(config)
    assert time_up_line(config, plan, 1_990, 1_990 * 128, False) == (
        "Time is up (--train-for 30s): stopped at episode 1990 of 2000, checkpoint saved")
    assert time_up_line(config, plan, 2, 256, True).startswith(
        "Time is up (--train-for 30s) before the run had measured its speed")
    cut = time_up_line(TrainConfig(train_for="1h", time_limit="10s", episodes=2_000), plan, 100, 12_800, False)
    assert cut.startswith("Time limit reached (--time-limit 10s): stopped at episode 100 of 2000 with ")


def test_rank_0s_fitted_episodes_reach_every_rank():
    empty = np.zeros((0, 6))
    rows = torch.stack([agreement_row(RankReport(empty, 4, False, 0, 1.0, fitted=2 ** 40 + 64)),
                        agreement_row(RankReport(empty, 4, False, 0, 1.0))])
    assert read_agreement(rows, 4).fitted_episodes == 2 ** 40 + 64  # exact in float64
    assert read_agreement(rows[1:], 4).fitted_episodes == 0


def test_an_episode_line_before_the_fit_has_no_total():
    totals = EpisodeTotals.of_records([[1.0, 100.0, 2.0, 1.0, 0.0, 16.0]])
    assert format_episode_line(10, None, totals).startswith("Episode 10 - Reward: 1.00, Return: $100.00")
    assert format_episode_line(10, 96, totals).startswith("Episode 10/96 - Reward: 1.00")


def _checkpoint_episodes(tmp_path: Path) -> int:
    state = torch.load(CheckpointDir(tmp_path / "checkpoints").latest(), map_location="cpu", weights_only=False)
    return state["config"]["episodes"]


def test_a_run_of_a_time_fits_its_episodes_and_resume_finishes_them(tmp_path: Path):
    result = cli_in_process(tmp_path, *TINY, "--train-for", "1s", "--checkpoint-interval", "1000000")
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "training.log").read_text()
    assert "episodes: fitted to --train-for 1s once a twentieth of it has passed" in log
    fitted = [int(n) for n in FIT.findall(log)]
    assert fitted and all(n % 2 == 0 for n in fitted)  # whole rounds of the 2 envs' episodes
    assert _checkpoint_episodes(tmp_path) == fitted[-1]  # the checkpoint records the fitted run
    done = int(re.search(r"Training finished: (\d+) episodes", log).group(1))
    if done == fitted[-1]:  # the episode lines count to the fitted total
        assert f"/{fitted[-1]} - Reward" in log
    else:  # a loaded machine slowed down after the fit: the clock stopped the run first, and said so
        assert done < fitted[-1] and f"Time is up (--train-for 1s): stopped at episode {done} of {fitted[-1]}" in log
    again = cli_in_process(tmp_path, "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert f"Training finished: {fitted[-1]} episodes" in (tmp_path / "training.log").read_text()
    more = cli_in_process(tmp_path, "--resume", "--train-for", "1s", "--no-progress")  # a second more
    assert more.returncode == 0, more.stderr
    log = (tmp_path / "training.log").read_text()
    log = log[log.rindex("Resumed from "):]  # the third invocation's lines
    assert f"at episode {fitted[-1]} (update " in log and "--train-for 1s from here" in log
    refit = [int(n) for n in FIT.findall(log)]
    assert refit and refit[0] > fitted[-1] and _checkpoint_episodes(tmp_path) == refit[-1]


def test_a_run_the_clock_stops_before_its_fit_is_recorded_as_what_it_trained(tmp_path: Path):
    result = cli_in_process(tmp_path, *TINY, "--train-for", "0.001s")  # up after the first iteration
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "training.log").read_text()
    assert "Time is up (--train-for 0.001s) before the run had measured its speed: it trained " in log
    done = int(re.search(r"Training finished: (\d+) episodes", log).group(1))
    assert _checkpoint_episodes(tmp_path) == max(1, done) < 2 ** 50


def test_train_for_with_episodes_is_one_line_and_exit_2(tmp_path: Path):
    result = cli_in_process(tmp_path, *TINY, "--train-for", "10s", "--episodes", "100")
    assert result.returncode == 2 and result.error_lines() == [
        "error: --train-for 10s sets the run's episodes from the time; drop --episodes, or drop --train-for to "
        "train a number of episodes"]
    saved = tmp_path / "settings.yaml"  # --print-config's file names every setting, --episodes too: it yields
    saved.write_text("episodes: 100\n")
    from_file = cli_in_process(tmp_path, *TINY, "--config", str(saved), "--train-for", "0.001s")
    assert from_file.returncode == 0, from_file.stderr
    bad = cli_in_process(tmp_path, *TINY, "--train-for", "soon")
    assert bad.returncode == 2 and bad.error_lines() == [
        "error: --train-for takes a positive duration such as 90s, 10min or 1h30m (a bare number is seconds), "
        "got 'soon'"]


@pytest.mark.e2e
def test_two_workers_take_the_same_fit(tmp_path: Path):
    result = run_cli(tmp_path, *TINY, *SPAWN2, "--train-for", "2s", "--checkpoint-interval", "1000000",
                     "--sync-check-interval", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "training.log").read_text()
    fitted = [int(n) for n in FIT.findall(log)]
    assert fitted and all(n % 4 == 0 for n in fitted)  # rounds of 2 workers x 2 envs
    assert _checkpoint_episodes(tmp_path) == fitted[-1]
    assert "Training finished: " in log


def test_a_resumed_run_of_a_time_goes_on_from_its_schedules_until_its_fit():
    """Until its first fit, a resumed --train-for run is one of its done episodes and what fits in
    the time at its recorded speed; it is not the endless run whose schedules stand at their start."""
    assert resumed_fit(128, 128, 128 * 16, 2.0, 1.0, 16, 2) == 192  # 1024 env-steps/s: 64 more in 1 s
    assert resumed_fit(128, 128, 0, 0.0, 1.0, 16, 2) == 130  # no speed recorded (format 1): one round more
    assert resumed_fit(100, 128, 0, 0.0, 1.0, 16, 2) == 128  # ... or the run's own episodes, if more
    assert resumed_fit(128, 128, 128 * 16, 2.0, 0.001, 16, 4) == 132  # at least a round of the 4 envs


def test_resume_train_for_of_a_finished_run_trains_at_annealed_rates_not_the_start_rate(tmp_path: Path):
    import csv
    first = cli_in_process(tmp_path, *TINY, "--episodes", "128", "--checkpoint-interval", "1000000")
    assert first.returncode == 0, first.stderr
    rows = list(csv.DictReader(open(tmp_path / "checkpoints" / "metrics.csv")))
    start, last = float(rows[0]["lr_actor"]), int(rows[-1]["update"])
    assert float(rows[-1]["lr_actor"]) < 0.05 * start  # annealed nearly to 0 at the run's end
    state = torch.load(CheckpointDir(tmp_path / "checkpoints").latest(), weights_only=True)
    assert state["counters"]["train_seconds"] > 0
    again = cli_in_process(tmp_path, "--resume", "--train-for", "1s", "--no-progress")
    assert again.returncode == 0, again.stderr
    rows = list(csv.DictReader(open(tmp_path / "checkpoints" / "metrics.csv")))
    resumed = [r for r in rows if int(r["update"]) > last]
    assert resumed and 0 < float(resumed[0]["lr_actor"]) < 0.9 * start  # the bug: the start rate, 1.0 x start
