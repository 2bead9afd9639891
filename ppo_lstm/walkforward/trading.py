"""Trading the test windows: one fold's window on one instrument, by a job's checkpoint,
by the seed ensemble and by the baselines, all through ``backtest_history``.

A test window is bars ``a..b-1`` of an instrument. Every one of them is scored: the
backtest's first decision is at the close of bar ``a-1`` (its observation the ``W`` bars up
to it, all before the window), its first order fills at bar ``a``'s open and its last bar
is ``b-1``. The per-bar returns ``[b-a]`` are the equity's
simple returns, bar ``a`` first; the windows of consecutive folds stitch end to end. The
positions ``[b-a]`` are the signed lots held during each of those bars: the target of the
decision at the close before it (0 once an account is bust).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from envs.config import EnvConfig
from envs.data import MarketData
from envs.data.instruments import instrument_name

from ..algo.agent import RecurrentActorCritic
from ..evaluation.backtest import BacktestResult, backtest_history
from ..evaluation.loading import load_policy
from ..rundir.checkpoint import BEST_NAME, CheckpointDir, atomic_write_bytes
from .folds import Fold
from .jobs import DONE_NAME, Job
from .policies import EnsemblePolicy, RulePolicy, flat_policy, ma_crossover_lots

BASELINES = ("buy_and_hold", "flat", "ma_10_40")


def window_bars(data: MarketData, calendar: np.ndarray, fold: Fold) -> tuple[int, int]:
    """The instrument's bars ``a..b-1`` within fold ``fold``'s test window of the ``calendar``."""
    a = int(np.searchsorted(data.timestamps, calendar[fold.test_lo], side="left"))
    b = int(np.searchsorted(data.timestamps, calendar[fold.test_hi - 1], side="right"))
    return a, b


def returns_of(equity: np.ndarray) -> np.ndarray:
    """Simple per-bar returns ``[T]`` of an equity curve ``[T+1]`` (0 once it is bust)."""
    equity = np.asarray(equity, dtype=np.float64)
    before = equity[:-1]
    return np.divide(equity[1:] - before, before, out=np.zeros_like(before), where=before > 0)


def trade(policy: Any, env: EnvConfig, data: MarketData, a: int, b: int) -> BacktestResult:
    """``policy`` (an agent or agent-like) greedily on bars ``a..b-1`` (every one scored)."""
    return backtest_history(policy, env, data, a - 1, b, greedy=True)  # the first decision at bar a - 1's close


def checkpoint_of(job: Job) -> Path:
    """The checkpoint that trades the job's test window: ``best.pt`` (its inner hold-out's pick)."""
    directory = job.path / job.config.checkpoint_dir
    best = directory / BEST_NAME
    if best.is_file():
        return best
    newest = CheckpointDir(directory).checkpoints()
    if not newest:
        raise FileNotFoundError(f"{directory}: no checkpoint; the job's training wrote none")
    return newest[0]


def finish_job(job: Job, datas: Sequence[MarketData], calendar: np.ndarray) -> None:
    """Trade the job's test window on every instrument with its checkpoint and write
    ``test.json`` (the job's marker of being done), atomically: per instrument the scored bars'
    ``time``, ``returns`` and ``positions`` ``[T]`` and the figures."""
    torch.set_num_threads(1)
    path = checkpoint_of(job)
    agent, config = load_policy(path)
    out: dict[str, Any] = {"fold": job.fold.k, "seed": job.seed, "checkpoint": str(path.relative_to(job.path)),
                           "instruments": {}}
    for data in datas:
        a, b = window_bars(data, calendar, job.fold)
        result = trade(agent, config.env, data, a, b)
        out["instruments"][instrument_name(data.source)] = {
            "time": [pd.Timestamp(t).isoformat() for t in result.time[1:]],
            "returns": returns_of(result.equity).tolist(), "positions": result.position.tolist(),
            "figures": result.agent.as_dict()}
    text = json.dumps(out)
    atomic_write_bytes(job.path / DONE_NAME, lambda handle: handle.write(text.encode("utf-8")))


def read_job(job: Job) -> dict[str, Any]:
    return json.loads((job.path / DONE_NAME).read_text(encoding="utf-8"))


@dataclass
class FoldTrades:
    """One fold on one instrument: ``time [T]`` of the scored bars and per-bar returns
    ``[T]`` of every seed (``seeds[s]``), the ensemble and the baselines; the positions ``[T]``
    (signed lots held during each bar) of every seed (``seed_positions[s]``, None when its
    ``test.json`` predates them) and of the ensemble (None when not traded here)."""

    time: np.ndarray
    seeds: dict[int, np.ndarray]
    ensemble: np.ndarray
    baselines: dict[str, np.ndarray]
    seed_positions: dict[int, Optional[np.ndarray]] = field(default_factory=dict)
    ensemble_positions: Optional[np.ndarray] = None


def trade_fold(jobs: Sequence[Job], data: MarketData, calendar: np.ndarray) -> FoldTrades:
    """The ensemble of ``jobs`` (one fold's seeds) and the baselines on the fold's window of ``data``;
    the seeds' returns and positions are read from their ``test.json``."""
    fold = jobs[0].fold
    name = instrument_name(data.source)
    done = {job.seed: read_job(job) for job in jobs}
    loaded = [load_policy(job.path / done[job.seed]["checkpoint"]) for job in jobs]
    agents: list[RecurrentActorCritic] = [agent for agent, _ in loaded]
    env = loaded[0][1].env
    a, b = window_bars(data, calendar, fold)
    ensemble = trade(EnsemblePolicy(agents), env, data, a, b)
    decisions = ensemble.bars
    flat = trade(flat_policy(env, decisions), env, data, a, b)
    ma = trade(RulePolicy(env, ma_crossover_lots(data.close, a - 1, decisions, env)), env, data, a, b)
    tested = {seed: one["instruments"][name] for seed, one in done.items()}
    return FoldTrades(time=np.asarray(ensemble.time[1:]),
                      seeds={s: np.asarray(t["returns"], dtype=np.float64) for s, t in tested.items()},
                      ensemble=returns_of(ensemble.equity),
                      baselines={"buy_and_hold": returns_of(ensemble.buy_and_hold_equity),
                                 "flat": returns_of(flat.equity), "ma_10_40": returns_of(ma.equity)},
                      seed_positions={s: _positions(t) for s, t in tested.items()},
                      ensemble_positions=ensemble.position.copy())


def _positions(tested: dict[str, Any]) -> Optional[np.ndarray]:
    """A seed's positions ``[T]`` from its ``test.json`` entry; None for a file written before they were kept."""
    return None if "positions" not in tested else np.asarray(tested["positions"], dtype=np.int64)
