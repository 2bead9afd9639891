"""The checkpoint a trial is scored by, measured in the walk-forward's units: the hold-out
backtest of a seed's ``best.pt`` again, its per-bar P&L over the starting equity ``r [T]``
(``walkforward.results.on_starting_capital``) beside buy-and-hold's ``r_bh [T]`` on the same
bars, and the per-bar Sharpe ratio of the hedged returns ``r - beta r_bh``
(:func:`ppo_lstm.stats.alpha.alpha_sharpe`), the statistic the walk-forward's Deflated Sharpe
Ratio deflates.

With several instruments, the equal-weight basket of the instruments the hold-out's means count
(at each stamp the mean of their P&L, an instrument without a bar there counting 0) against
the same basket of their buy-and-holds, as the walk-forward's verdict does. A policy that holds a
fixed exposure (flat, always long) has no hedged variation: its alpha Sharpe ratio counts 0.

:func:`write_measure` runs in a seed's training process once its run has ended (the backtest
needs no second torch start-up there) and leaves a small JSON file that the trial process reads
(:func:`read_measure`).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import torch

from ..evaluation.loading import load_policy
from ..rundir.checkpoint import BEST_NAME
from ..stats.alpha import alpha_sharpe
from ..data_split import load_training_data
from ..train.holdout import Holdout, HoldoutResult, InstrumentsResult
from ..evaluation.backtest import BacktestResult
from ..walkforward.results import on_starting_capital
from ..walkforward.trading import returns_of

MIN_BARS = 3  # alpha_sharpe's least


@dataclass(frozen=True)
class HoldoutMeasure:
    """``alpha_sharpe``: the per-bar Sharpe ratio of the hedged hold-out returns (None over fewer
    than 3 bars); ``bars``: the hold-out bars it was measured over; ``buy_and_hold_sharpe``:
    buy-and-hold's annualised hold-out Sharpe ratio (the mean over instruments, as metrics.csv's)."""

    alpha_sharpe: Optional[float]
    bars: int
    buy_and_hold_sharpe: Optional[float]


def _capital(result: BacktestResult) -> tuple[np.ndarray, np.ndarray]:
    """The agent's and buy-and-hold's per-bar P&L over the starting equity ``[T]`` of one backtest
    (``on_starting_capital``; chained simulated episodes each from their own start)."""
    agent, bench = returns_of(result.equity), returns_of(result.buy_and_hold_equity)
    account = np.arange(agent.size) // (result.episode_length or max(agent.size, 1))  # [T]
    return on_starting_capital(agent, account), on_starting_capital(bench, account)


def _returns(result: HoldoutResult) -> tuple[np.ndarray, np.ndarray]:
    """The agent's and buy-and-hold's per-bar hold-out P&L ``[T]`` in the walk-forward's units (a
    basket's with several instruments)."""
    if not isinstance(result, InstrumentsResult):
        return _capital(result)
    names = list(result.results if result.counted is None else result.counted)
    frame = pd.concat([pd.DataFrame({"time": result.results[n].time[1:],
                                     **dict(zip(("agent", "bench"), _capital(result.results[n])))})
                       for n in names])
    sums = frame.groupby("time", sort=True)[["agent", "bench"]].sum() / len(names)
    return sums["agent"].to_numpy(), sums["bench"].to_numpy()


def measure(run_dir: Path) -> HoldoutMeasure:
    """Backtest ``run_dir/best.pt`` on its run's hold-out (on the CPU, greedy, as the trainer did)."""
    agent, config = load_policy(run_dir / BEST_NAME)
    datas, splits = load_training_data(config) if config.data is not None else (None, None)
    holdout = Holdout.of(config, datas, splits)
    assert holdout is not None, "a trial's run always has a hold-out"
    with torch.no_grad():
        result = holdout.run(agent, torch.device("cpu"))
    agent_r, bench_r = _returns(result)
    ratio = (alpha_sharpe(agent_r, bench_r) or 0.0) if agent_r.size >= MIN_BARS else None
    if isinstance(result, InstrumentsResult):
        bench_sharpe = result.mean("sharpe", "buy_and_hold")
    else:
        bench_sharpe = result.buy_and_hold.sharpe
    return HoldoutMeasure(ratio, int(agent_r.size), bench_sharpe)


def measure_path(run_dir: Path) -> Path:
    """Where :func:`write_measure` leaves its file: beside the run dir, hidden."""
    return run_dir.parent / f".{run_dir.name}.holdout.json"


def write_measure(run_dir: Path) -> None:
    """:func:`measure` ``run_dir`` into :func:`measure_path`."""
    path = measure_path(run_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(measure(run_dir))), encoding="utf-8")
    os.replace(tmp, path)


def read_measure(run_dir: Path) -> Optional[HoldoutMeasure]:
    """The measure :func:`write_measure` left for ``run_dir`` (None when there is none); removes its file."""
    path = measure_path(run_dir)
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    return HoldoutMeasure(**values)
