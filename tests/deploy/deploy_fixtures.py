"""Shared by the deploy tests (test_policy, test_predict, test_onnx, test_ema): a CSV of daily bars and a
tiny model trained on it by the training CLI's main() (in this process: ``cli_in_process``); the
same with two feature columns, and with EMA spans; feeding a policy bar by bar (``stream``) and the
backtest's own observations (``backtest_observations``)."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Callable

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import TINY, cli_in_process
from envs.config import EnvConfig
from envs.core import TradingCore
from envs.data import MarketData
from ppo_lstm import TradingPolicy
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.deploy.policy import Decision
from ppo_lstm.evaluation.engine import PolicyStepper

BARS = 260
FEATURES = "vol_z,Mom"  # as the training command names them: the file has Vol_Z and mom
VOL_WARMUP = 30  # Vol_Z's leading NaN rows (mom has 10): every feature is defined from bar 30 on
EMA_SPANS = (5, 40)  # the --ema-spans of ema_run (its window is TINY's 8)


def write_prices(path: Path, bars: int = BARS, seed: int = 5) -> pd.DataFrame:
    """``bars`` business days of a random walk with regimes of drift, in cents, opens off the
    previous close; with a Volume column."""
    rng = np.random.default_rng(seed)
    drift = np.repeat(rng.choice([-0.004, 0.004], size=bars // 20 + 1), 20)[:bars]
    close = np.round(100.0 * np.exp(np.cumsum(drift + 0.012 * rng.standard_normal(bars))), 2)
    open_ = np.round(np.r_[100.0, close[:-1]] * np.exp(0.002 * rng.standard_normal(bars)), 2)
    frame = pd.DataFrame({"Date": pd.bdate_range("2021-01-01", periods=bars).strftime("%Y-%m-%d"),
                          "Open": open_, "High": np.maximum(open_, close) + 0.25,
                          "Low": np.minimum(open_, close) - 0.25, "Close": close,
                          "Volume": rng.integers(1000, 5000, bars)})
    frame.to_csv(path, index=False)
    return frame


def write_featured_prices(path: Path, bars: int = BARS, seed: int = 5) -> pd.DataFrame:
    """``write_prices``'s bars with two indicator columns that start with NaN rows, as real
    indicators do: ``Vol_Z`` (30-bar volatility of the log returns, in %: NaN for bars 0..29)
    and ``mom`` (10-bar momentum: NaN for bars 0..9)."""
    frame = write_prices(path, bars, seed)
    returns = np.log(frame["Close"]).diff()
    frame["Vol_Z"] = np.round(100.0 * returns.rolling(VOL_WARMUP).std(), 6)
    frame["mom"] = np.round(frame["Close"] / frame["Close"].shift(10) - 1.0, 6)
    assert frame["Vol_Z"].isna().sum() == VOL_WARMUP and frame["mom"].isna().sum() == 10
    frame.to_csv(path, index=False)
    return frame


def featured_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with prices.csv (``write_featured_prices``) and checkpoints/ of a tiny model
    trained on it with ``--features vol_z,Mom``, trained once per test session and shared by
    the pytest-xdist workers (under a file lock). Tests read it; they write elsewhere."""
    return _shared_run(tmp_path_factory, "deploy-featured", write_featured_prices, "--features", FEATURES)


def ema_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with prices.csv (``write_prices``) and checkpoints/ of a tiny model trained on it
    with ``--ema-spans 5,40`` (shared as ``featured_run``'s; read only)."""
    return _shared_run(tmp_path_factory, "deploy-ema", write_prices, "--ema-spans", ",".join(map(str, EMA_SPANS)))


def _shared_run(tmp_path_factory: pytest.TempPathFactory, name: str, write: Callable[[Path], pd.DataFrame],
                *extra: str) -> Path:
    """``name``: prices.csv written by ``write`` and a tiny model trained on it with ``extra``, once
    per test session, shared by the pytest-xdist workers (under a file lock)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, common to its workers
    cwd = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cwd / "trained").exists():
            cwd.mkdir(exist_ok=True)
            write(cwd / "prices.csv")
            result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval",
                                    "8", *extra)
            assert result.returncode == 0, result.output
            (cwd / "trained").write_text("ok\n")
    return cwd


def train_tiny(cwd: Path, *extra: str) -> Path:
    """Train a tiny model on ``cwd/prices.csv`` (written here); returns its best.pt."""
    write_prices(cwd / "prices.csv")
    result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval", "8",
                            *extra)
    assert result.returncode == 0, result.output
    return cwd / "checkpoints" / "best.pt"


def write_head(source: Path, target: Path, rows: int) -> Path:
    """The header and the first ``rows`` data rows of a CSV (a file as it stood earlier)."""
    lines = source.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[: rows + 1]))
    return target


def stream(policy: TradingPolicy, data: MarketData, start: str | None = None) -> list[Decision]:
    """Every decision of ``policy`` fed ``data`` one bar at a time through the public ``update``."""
    policy.reset()
    policy.begin(start)
    decisions = []
    for i in range(len(data)):
        decision = policy.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i],
                                 data.volume[i])
        if decision is not None:
            decisions.append(decision)
    return decisions


def backtest_observations(agent: RecurrentActorCritic, env: EnvConfig, data: MarketData, lo: int,
                          positions: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
    """The observations [T+1, D] the backtest's core shows the agent (set up as backtest_history does)
    when it trades ``positions`` [T], and the logits [T+1, A] of the backtest's PolicyStepper on them."""
    steps = len(positions)
    core = TradingCore(2, dataclasses.replace(env, episode_length=steps), data, span=(lo, len(data)),
                       time_scale=env.episode_length)
    core.rngs = [np.random.default_rng(0), np.random.default_rng(0)]
    core.reset_rows(core.rows)
    offset = 0 if env.no_short else env.max_position
    stepper, observations, logits = PolicyStepper(agent, 1, "cpu"), [], []
    with torch.inference_mode():
        for t in range(steps + 1):
            obs = core.observe()[:1]
            observations.append(obs[0].copy())
            logits.append(stepper(obs)[0])
            if t < steps:
                core.step(np.array([positions[t] + offset, env.num_actions - 1]))
    return np.array(observations), torch.stack(logits)
