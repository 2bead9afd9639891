"""The hold-out during training: the split of --data (and --data-start/--data-end), that
training never reads a held-out bar, the checkpoint-time backtest (log line, metrics.csv,
best.pt), the end-of-run summary whose evaluate command reproduces the figures, the
simulated hold-out, and no skill on a pure random walk."""
from __future__ import annotations

import csv
import json
import math
import random
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import TINY, Run, cli_in_process, load_state
from envs.config import EnvConfig
from envs.data import load_ohlcv
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker
from ppo_lstm.errors import UsageError
from ppo_lstm.data_split import DataSplit, split_data
from ppo_lstm.train.holdout import Holdout
from ppo_lstm.rundir.logger import HOLDOUT_COLUMNS, METRIC_COLUMNS, UPDATE_COLUMNS, upgrade_metrics_header
from ppo_lstm.train.shutdown import StopRequest
from ppo_lstm.train.trainer import Trainer

HOLDOUT_LINE = re.compile(r"^Holdout @ episode (\d+) - Return: ([+-]\d+\.\d\d)%, Sharpe: (-?\d+\.\d\d|-), "
                          r"Max DD: (\d+\.\d\d)%, Buy&Hold: ([+-]\d+\.\d\d)%$")
SIMULATED_HOLDOUT_LINE = re.compile(
    r"Holdout @ episode \d+ - Return: ([+-]\d+\.\d\d)% \(\d+ episodes chained; per episode ([+-]\d+\.\d\d)% mean, "
    r"(\d+\.\d\d)% sd\), Sharpe: (?:-?\d+\.\d\d|-), Max DD: \d+\.\d\d%, "
    r"Buy&Hold: ([+-]\d+\.\d\d)% \(per episode ([+-]\d+\.\d\d)% mean\)$")
WINDOW, LENGTH = 8, 16  # TINY's


def write_walk(path: Path, bars: int, seed: int, drift: float = 0.0, sigma: float = 0.01) -> np.ndarray:
    """``bars`` daily bars of a geometric random walk (opens at the previous close)."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(drift + sigma * rng.standard_normal(bars)))
    open_ = np.r_[100.0, close[:-1]]
    pd.DataFrame({"date": pd.date_range("2020-01-01", periods=bars, freq="D").strftime("%Y-%m-%d"),
                  "open": open_, "high": np.maximum(open_, close), "low": np.minimum(open_, close),
                  "close": close, "volume": 1000}).to_csv(path, index=False)
    return close


def tiny_config(tmp_path: Path, **overrides) -> TrainConfig:
    values = dict(episodes=16, num_envs=2, update_interval=32, minibatches=2, hidden_size=16, lstm_size=16, seed=3,
                  progress=False, checkpoint_interval=8, log_file=str(tmp_path / "train.log"),
                  checkpoint_dir=str(tmp_path / "ck"), device="cpu")
    values.update(overrides)
    env = values.pop("env", EnvConfig(market="regime", window=WINDOW, episode_length=LENGTH))
    return TrainConfig(env=env, **values)


def train_in_process(config: TrainConfig) -> Trainer:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
        assert trainer.run() == 0
    finally:
        torch.set_num_threads(threads)
    return trainer


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


# ----------------------------------------------------------------------------- the split


def test_split_keeps_the_last_fraction_of_the_selected_bars(tmp_path):
    write_walk(tmp_path / "p.csv", 200, seed=1)
    data = load_ohlcv(tmp_path / "p.csv")
    assert split_data(data, tiny_config(tmp_path, data="p.csv")) == DataSplit(0, 160, 200)
    assert split_data(data, tiny_config(tmp_path, data="p.csv", holdout=0.0)) == DataSplit(0, 200, 200)
    # 2020-01-11 is bar 10, 2020-06-08 bar 159: 150 bars selected, the last 30 held out
    split = split_data(data, tiny_config(tmp_path, data="p.csv", data_start="2020-01-11", data_end="2020-06-08"))
    assert split == DataSplit(10, 130, 160)
    assert split.train_span == (10, 130) and split.holdout_bars == 30
    assert split.backtest_span() == (130, 160)  # the first decision at the close of bar 130, the first held out


@pytest.mark.parametrize("overrides, message", [
    (dict(holdout=0.9), r"p\.csv: 20 bars \(.*\) are left for training after --holdout 0\.9; one episode needs "
                        r"window \+ episode-length \+ 1 = 25"),
    (dict(holdout=0.004), r"--holdout 0\.004 keeps 1 of 200 bars out of training; a hold-out needs at least 3"),
    (dict(holdout=0.01), r"--holdout 0\.01 keeps 2 of 200 bars out of training; a hold-out needs at least 3"),
    (dict(holdout=0.001), r"--holdout 0\.001 keeps 0 of 200 bars out of training; .* or pass --holdout 0"),
    (dict(data_start="2021-01-01"), r"no bars from 2021-01-01 to the end"),
    (dict(data_start="2020-03-01", data_end="2020-02-01"), r"--data-start 2020-03-01 is after --data-end 2020-02-01"),
    (dict(data_end="someday"), r"--data-end 'someday' is not a date"),
])
def test_bad_splits_are_one_line_errors(tmp_path, overrides, message):
    write_walk(tmp_path / "p.csv", 200, seed=1)
    with pytest.raises(UsageError, match=message):
        split_data(load_ohlcv(tmp_path / "p.csv"), tiny_config(tmp_path, data="p.csv", **overrides))


def test_a_split_too_short_exits_2_before_anything_is_written(tmp_path):
    write_walk(tmp_path / "p.csv", 200, seed=1)
    result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--data", "p.csv", "--holdout", "0.95")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.output
    assert result.error_lines() == ["error: p.csv: 10 bars (2020-01-01 00:00:00 to 2020-01-10 00:00:00) are left "
                                    "for training after --holdout 0.95; one episode needs window + episode-length "
                                    "+ 1 = 25; lower --holdout, --window or --episode-length, or use more data"]
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "training.log").exists()


@pytest.mark.parametrize("args, message", [
    (["--holdout", "1"], "--holdout must be a fraction within [0, 1), got 1.0"),
    (["--holdout", "-0.1"], "--holdout must be a fraction within [0, 1), got -0.1"),
    (["--holdout-episodes", "-1"], "--holdout-episodes must be >= 0"),
    (["--data-start", "2020-01-01"], "--data-start selects bars of --data; pass --data too"),
    (["--data", "p.csv", "--data-end", "2019-01-01"], "no bars from the start to 2019-01-01"),
])
def test_bad_holdout_flags_are_one_line_exit_2(tmp_path, monkeypatch, capsys, args, message):
    from ppo_lstm.cli import main as train_main

    write_walk(tmp_path / "p.csv", 200, seed=1)
    monkeypatch.chdir(tmp_path)
    assert train_main([*TINY, "--episodes", "4", *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_training_never_reads_a_held_out_bar(tmp_path):
    """Two files that differ only in the held-out bars train bit-identical weights."""
    write_walk(tmp_path / "a.csv", 200, seed=5)
    frame = pd.read_csv(tmp_path / "a.csv")
    frame.loc[160:, ["open", "high", "low", "close"]] *= 3.0  # a wild, very different future
    frame.to_csv(tmp_path / "b.csv", index=False)
    weights = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        config = tiny_config(tmp_path / name, data=str(tmp_path / f"{name}.csv"), holdout=0.2)
        trainer = train_in_process(config)
        weights.append({k: v.clone() for k, v in trainer.agent.state_dict().items()})
        assert trainer.rollout.env.core.start.max() + WINDOW + LENGTH + 1 <= 160
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


# ----------------------------------------------------------------------------- training with a hold-out


@pytest.mark.e2e
def test_holdout_lines_metrics_best_and_a_summary_that_reproduces(tmp_path):
    write_walk(tmp_path / "prices.csv", 300, seed=2, drift=0.001)
    # the training in this process; the command it prints runs below in a real one
    result = cli_in_process(tmp_path, *TINY, "--data", "prices.csv", "--holdout", "0.25", "--data-start",
                            "2020-01-06", "--episodes", "24", "--checkpoint-interval", "8")
    assert result.returncode == 0, result.output
    out = result.stdout.splitlines()
    assert ("Hold-out: the last 74 bars of prices.csv (2020-08-14 00:00:00 to 2020-10-26 00:00:00) are kept out "
            "of training; training uses bars 2020-01-06 00:00:00 to 2020-08-13 00:00:00. Each checkpoint is "
            "backtested on the hold-out; best.pt is the best hold-out return") in out
    held = [HOLDOUT_LINE.match(line) for line in out if line.startswith("Holdout @")]
    assert [int(m.group(1)) for m in held if m] == [8, 16, 24] and all(held)
    log = (tmp_path / "training.log").read_text().splitlines()
    assert [line for line in log if line.startswith("Holdout @")] == [m.group(0) for m in held]
    # metrics.csv: the figures on the three checkpoint rows, empty elsewhere
    rows = metric_rows(tmp_path / "checkpoints")
    with_holdout = [r for r in rows if r["holdout_return_pct"]]
    assert [int(r["episodes"]) for r in with_holdout] == [8, 16, 24]
    assert all(not any(r[c] for c in HOLDOUT_COLUMNS) for r in rows if r not in with_holdout)
    returns = [float(r["holdout_return_pct"]) for r in with_holdout]
    assert [f"{x:+.2f}" for x in returns] == [m.group(2) for m in held]
    assert [f"{float(r['holdout_buy_and_hold_pct']):+.2f}" for r in with_holdout] == [m.group(5) for m in held]
    # best.pt is the checkpoint with the best hold-out return
    best = int(np.argmax(returns))
    assert load_state(tmp_path / "checkpoints" / "best.pt")["counters"]["global_episodes"] == 8 * (best + 1)
    # the summary: both paths, the best figures, and a command that reproduces them
    assert "Last checkpoint: checkpoints/checkpoint_u00000012.pt" in out
    assert f"Best checkpoint: checkpoints/best.pt (best hold-out return): {held[best].group(0)}" in out
    command = next(line for line in out if line.startswith("Reproduce it: "))[len("Reproduce it: "):]
    assert command in log[-1]
    words = shlex.split(command)
    assert words[:3] == ["evaluate-ppo-lstm", "--checkpoint", "checkpoints/best.pt"]
    evaluated = Run(tmp_path, words[1:] + ["--json"], launcher=[sys.executable, "-m", "ppo_lstm.evaluate"]).wait()
    assert evaluated.returncode == 0, evaluated.output
    report = json.loads(evaluated.stdout)
    # the first held-out bar is --start and the first decision bar; the 73 after it are traded
    assert words[words.index("--start") + 1] == "2020-08-14T00:00:00"
    assert report["bars"] == 73 and report["start"] == "2020-08-14T00:00:00" and report["end"] == "2020-10-26T00:00:00"
    assert report["agent"]["total_return_pct"] == pytest.approx(returns[best], abs=1e-5)
    assert report["buy_and_hold"]["total_return_pct"] == pytest.approx(
        float(with_holdout[best]["holdout_buy_and_hold_pct"]), abs=1e-5)


def test_simulated_holdout_reproduces_with_the_printed_command(tmp_path, capsys):
    from ppo_lstm.evaluation.cli import main as evaluate_main

    trainer = train_in_process(tiny_config(tmp_path, holdout_episodes=6))
    out = (tmp_path / "train.log").read_text().splitlines()  # the console lines, as logged
    capsys.readouterr()
    assert ("Hold-out: 6 simulated 'regime' episodes on evaluation seeds no training env draws, backtested at each "
            "checkpoint; best.pt is the best hold-out return") in out
    best = trainer.state.best_holdout
    command = next(line for line in out if line.startswith("Reproduce it: "))[len("Reproduce it: "):]
    assert command == f"evaluate-ppo-lstm --checkpoint {tmp_path / 'ck' / 'best.pt'} --episodes 6 --seed 3"
    assert evaluate_main(shlex.split(command)[1:] + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bars"] == 6 * LENGTH
    assert report["agent"]["total_return_pct"] == pytest.approx(best["holdout_return_pct"], abs=1e-5)
    # the line gives the chained return, then the episodes' own mean and sd, as the report does
    summary = next(line for line in out if line.startswith("Best checkpoint: "))
    line = SIMULATED_HOLDOUT_LINE.search(summary)
    assert line and "(6 episodes chained; " in summary, summary
    chained, mean, sd, hold_mean = (float(line.group(k)) for k in (1, 2, 3, 5))
    assert chained == pytest.approx(report["agent"]["total_return_pct"], abs=0.006)
    assert mean == pytest.approx(report["per_episode"]["agent"]["mean_return_pct"], abs=0.006)
    assert sd == pytest.approx(report["per_episode"]["agent"]["std_return_pct"], abs=0.006)
    assert float(line.group(4)) == pytest.approx(report["buy_and_hold"]["total_return_pct"], abs=0.006)
    assert hold_mean == pytest.approx(report["per_episode"]["buy_and_hold"]["mean_return_pct"], abs=0.006)


def test_the_holdout_backtest_touches_no_global_rng(tmp_path):
    write_walk(tmp_path / "p.csv", 200, seed=1)
    for data in (None, str(tmp_path / "p.csv")):
        config = tiny_config(tmp_path, data=data)
        loaded = load_ohlcv(data) if data else None
        holdout = Holdout.of(config, [loaded] if loaded else None, [split_data(loaded, config)] if loaded else None)
        agent = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest()).agent
        before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
        holdout.run(agent, torch.device("cpu"))
        assert torch.equal(torch.get_rng_state(), before[0])
        assert np.array_equal(np.random.get_state()[1], before[1]) and random.getstate() == before[2]


def test_without_a_holdout_best_is_by_training_return(tmp_path):
    train_in_process(tiny_config(tmp_path, holdout=0.0))
    out = (tmp_path / "train.log").read_text()
    assert "Hold-out: none (--holdout 0 or --holdout-episodes 0); best.pt is the checkpoint whose period had the " \
           "best mean training return" in out
    assert "Holdout @" not in out and "(best mean training return of a checkpoint period; no hold-out" in out
    assert all(not r["holdout_return_pct"] for r in metric_rows(tmp_path / "ck"))


def test_an_older_metrics_file_gains_the_holdout_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=UPDATE_COLUMNS)
        writer.writeheader()
        writer.writerow({c: i for i, c in enumerate(UPDATE_COLUMNS)})
    assert upgrade_metrics_header(path) == METRIC_COLUMNS
    rows = metric_rows(tmp_path)
    assert list(rows[0]) == list(METRIC_COLUMNS) and rows[0]["update"] == "0"
    assert all(rows[0][c] == "" for c in HOLDOUT_COLUMNS)
    assert upgrade_metrics_header(path) == METRIC_COLUMNS  # already current: left alone


# ----------------------------------------------------------------------------- no skill on a random walk


def test_no_skill_out_of_sample_on_a_random_walk(tmp_path):
    """On a driftless random walk no causal policy has an edge: the hold-out return plus
    the costs paid has mean 0, with a per-seed spread of at most sigma * sqrt(bars) (one
    lot is the whole account). Trained agents (each on its own walk) must show exactly
    that: their mean gross hold-out return within 3 standard errors of 0."""
    sigma, bars, seeds = 0.01, 400, 6
    gross = []
    for seed in range(seeds):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        write_walk(run / "walk.csv", bars, seed=100 + seed, sigma=sigma)
        config = tiny_config(run, data=str(run / "walk.csv"), holdout=0.5, episodes=48, seed=seed,
                             checkpoint_interval=48)
        trainer = train_in_process(config)
        result = trainer.holdout.run(trainer.agent, torch.device("cpu"))
        logged = float(metric_rows(run / "ck")[-1]["holdout_return_pct"])
        assert result.agent.total_return_pct == pytest.approx(logged, abs=1e-5)  # the line's figure
        gross.append(result.agent.total_return_pct + 100.0 * result.agent.fees_paid / config.env.initial_cash)
    held_bars = bars // 2
    standard_error = 100.0 * sigma * math.sqrt(held_bars) / math.sqrt(seeds)
    assert abs(float(np.mean(gross))) < 3.0 * standard_error, (gross, standard_error)


def test_a_second_holdout_at_the_same_episode_count_names_its_update(tmp_path):
    """A stop between two rounds of episodes (--time-limit) backtests later weights at the episode count
    of the periodic hold-out just before it: the second line says which update it is."""
    trainer = Trainer(tiny_config(tmp_path), Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
    try:
        trainer._run_holdout()
        trainer.state.update = 3
        trainer._run_holdout()
        trainer.state.global_episodes = 2
        trainer._run_holdout()
    finally:
        trainer.log.close()
    lines = [line for line in (tmp_path / "train.log").read_text().splitlines() if line.startswith("Holdout @")]
    assert [re.match(r"Holdout @ episode (\d+) - ", line).group(1) for line in lines] == ["0", "0", "2"]
    assert SIMULATED_HOLDOUT_LINE.match(lines[0]) and SIMULATED_HOLDOUT_LINE.match(lines[2])  # the usual lines
    assert lines[1].endswith(" mean) (update 3, after the line above at this episode count)")
