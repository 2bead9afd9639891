"""Held-out bars of ``bench/learning.py`` and how to score trading them: ``Paths`` (bars of m
episodes and a factory of the env's own ``TradingCore``), ``trade`` (drive the core with
target lots and score it) and ``score_backtest`` (score a ``BacktestResult``).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import math  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402
from gymnasium.utils import seeding  # noqa: E402

from envs.config import EnvConfig  # noqa: E402
from envs.core import TradingCore  # noqa: E402
from envs.data import MarketData  # noqa: E402

@dataclass
class Paths:
    """Bars of m episodes ([m, B] open/close and the hidden drift, or None) and how to trade them.

    ``new_core()`` gives a seeded TradingCore before its first reset; the m episodes are
    ``blocks`` consecutive episodes of its ``m / blocks`` envs (block k: rows k*n..(k+1)*n-1).
    """

    env: EnvConfig
    open: np.ndarray
    close: np.ndarray
    drift: Optional[np.ndarray]
    new_core: Any
    blocks: int = 1
    additive: bool = False  # score by money made per bar (see additive_score), not by log growth


def simulated_paths(env: EnvConfig, seeds: list[int], episodes_per_seed: int = 1) -> Paths:
    """``episodes_per_seed`` consecutive episodes of each seed's env, as the trainer's envs draw them."""

    def new_core() -> TradingCore:
        core = TradingCore(len(seeds), env)
        core.rngs = [seeding.np_random(s)[0] for s in seeds]
        core.market.record_drift()
        return core

    core = new_core()
    opens, closes, drifts = [], [], []
    for _ in range(episodes_per_seed):
        core.reset_rows(core.rows)
        opens.append(core.open.copy())
        closes.append(core.close.copy())
        drifts.append(core.market.drift.copy())
    return Paths(env, np.concatenate(opens), np.concatenate(closes), np.concatenate(drifts), new_core,
                 episodes_per_seed)


def history_paths(env: EnvConfig, data: MarketData, drift: np.ndarray, additive: bool = False) -> Paths:
    """The whole file as one continuous episode (as ``backtest_history`` trades it)."""
    steps = len(data) - env.window - 1
    config = replace(env, episode_length=steps)

    def new_core() -> TradingCore:
        core = TradingCore(1, config, data, span=(0, len(data)), time_scale=env.episode_length)
        core.rngs = [np.random.default_rng(0)]  # one start is possible: no draw matters
        return core

    core = new_core()
    core.reset_rows(core.rows)
    return Paths(config, core.open.copy(), core.close.copy(), drift[None, :], new_core, additive=additive)


def trade(paths: Paths, lots: np.ndarray) -> dict[str, float]:
    """Drive the env's TradingCore with target ``lots`` [m, L] (episodes start flat); score it."""
    env = paths.env
    offset = 0 if env.no_short else env.max_position
    m, L = lots.shape
    n = m // paths.blocks
    core = paths.new_core()
    log_growth = 0.0
    for k in range(paths.blocks):
        core.reset_rows(core.rows)
        actions = (lots[k * n:(k + 1) * n] + offset).astype(np.int64)
        for j in range(L):
            core.step(actions[:, j])
        if paths.additive:
            log_growth += float(np.sum(core.ledger.equity / env.initial_cash - 1.0))
        else:
            log_growth += float(np.sum(np.log(np.maximum(core.ledger.equity, 1e-300) / env.initial_cash)))
    traded = float(np.abs(np.diff(lots, axis=1, prepend=0.0)).sum())
    return {"bps_per_bar": 1e4 * log_growth / (m * L), "turnover": 100.0 * traded / (m * L)}


def score_backtest(result, additive: bool = False) -> dict[str, float]:
    """Score and turnover (lots traded per 100 bars, episodes start flat) of a BacktestResult.

    ``additive``: the money made per bar in bps of the starting cash, ``(equity[T] /
    equity[0] - 1) / T`` (a continuous backtest trades a fixed number of units, so over a
    long, profitable file its equity grows by adding, not compounding, and log growth per
    bar shrinks as the file gets longer); else log growth per bar."""
    bars = result.bars
    if additive:
        growth = result.equity[-1] / result.equity[0] - 1.0
    else:
        growth = math.log(max(result.equity[-1], 1e-300) / result.equity[0])
    pos = result.position.astype(np.float64)
    L = result.episode_length or bars
    pos = pos.reshape(-1, L)
    traded = float(np.abs(np.diff(pos, axis=1, prepend=0.0)).sum())
    return {"bps_per_bar": 1e4 * growth / bars, "turnover": 100.0 * traded / bars}

