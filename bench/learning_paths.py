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


def history_paths(env: EnvConfig, data: MarketData, drift: np.ndarray, additive: bool = False,
                  start: Optional[int] = None, end: Optional[int] = None, copies: int = 1) -> Paths:
    """The whole file as one continuous episode (as ``backtest_history`` trades it), or its bars
    ``start..end-1`` (first decision at the close of bar ``start``, as ``backtest_history(...,
    start, end)`` trades them; ``start`` >= the window). ``copies``: that many envs trading the
    same bars, so :func:`trade` scores several rules' lots [copies, L] in one pass."""
    first = env.window if start is None else int(start)
    stop = len(data) if end is None else int(end)
    if first < env.window or stop > len(data) or stop - first < 2:
        raise ValueError(f"bars {first}..{stop - 1} of {len(data)}: need start >= window {env.window} and 2 bars")
    lo = first - env.window
    config = replace(env, episode_length=stop - first - 1)

    def new_core() -> TradingCore:
        core = TradingCore(copies, config, data, span=(lo, stop), time_scale=env.episode_length)
        core.rngs = [np.random.default_rng(0) for _ in range(copies)]  # one start is possible: no draw matters
        return core

    core = new_core()
    core.reset_rows(core.rows)
    return Paths(config, core.open[:1].copy(), core.close[:1].copy(), drift[None, lo:stop], new_core,
                 additive=additive)


def trade(paths: Paths, lots: np.ndarray, per_row: bool = False) -> dict[str, Any]:
    """Drive the env's TradingCore with target ``lots`` [m, L] (episodes start flat); score it.

    ``per_row`` (one block only): each env's own score and turnover, arrays [m], as for the
    ``copies`` of :func:`history_paths`, each trading another rule on the same bars."""
    env = paths.env
    offset = 0 if env.no_short else env.max_position
    m, L = lots.shape
    n = m // paths.blocks
    if per_row and paths.blocks != 1:
        raise ValueError(f"per_row scores need one block of episodes, not {paths.blocks}")
    core = paths.new_core()
    log_growth = 0.0
    rows = np.zeros(n)
    for k in range(paths.blocks):
        core.reset_rows(core.rows)
        actions = (lots[k * n:(k + 1) * n] + offset).astype(np.int64)
        for j in range(L):
            core.step(actions[:, j])
        if paths.additive:
            gain = core.ledger.equity / env.initial_cash - 1.0
        else:
            gain = np.log(np.maximum(core.ledger.equity, 1e-300) / env.initial_cash)
        log_growth += float(np.sum(gain))
        rows += gain
    traded = np.abs(np.diff(lots, axis=1, prepend=0.0))
    if per_row:
        return {"bps_per_bar": 1e4 * rows / L, "turnover": 100.0 * traded.sum(axis=1) / L}
    return {"bps_per_bar": 1e4 * log_growth / (m * L), "turnover": 100.0 * float(traded.sum()) / (m * L)}


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

