"""The out-of-sample returns of a walk-forward, stitched, and every figure and the verdict.

``oos`` (one row per instrument and scored bar, oldest first): ``time``, ``instrument``,
``fold``, ``seed_<s>`` per seed, ``ensemble`` and the baselines (simple per-bar returns).
With several instruments the verdict is about the equal-weight basket: at each stamp the
mean of the instruments' returns (an instrument without a bar there counts 0), i.e. cash
split equally among them and rebalanced every bar.

The verdict (:func:`verdict_of`) is the seed ensemble's against buy-and-hold. Its trial
count is :func:`trial_count`, the one place that counts trials.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

import numpy as np
import pandas as pd

from ..stats import annualised_return, annualised_sharpe, edge_verdict, max_drawdown, per_period_sharpe, trial_variance
from .config import WalkForwardConfig
from .trading import BASELINES, FoldTrades

ALPHA = 0.05


class StudyTrials(Protocol):
    """What the verdict takes from a tuning study (``ppo_lstm.tune.study_stats.TrialStats``)."""

    trials: int
    sharpes: tuple[float, ...]

    @property
    def per_period_variance(self) -> float: ...

BOOTSTRAP_REPS = 2000


def trial_count(wf: WalkForwardConfig, study: Optional[StudyTrials] = None) -> int:
    """The Deflated Sharpe Ratio's number of trials: seeds x the configurations tried.

    The configurations are ``--configs-tried``; with ``--study``, the study's finished trials
    plus ``--configs-tried - 1`` tried outside it (the tuned configuration is one of the trials).
    """
    configurations = wf.configs_tried if study is None else study.trials + wf.configs_tried - 1
    return wf.seeds * max(configurations, 1)


def trial_variance_of(seed_sharpes: Sequence[float], bars: int, study: Optional[StudyTrials]) -> float:
    """The per-bar variance of the trials' Sharpe ratios for the DSR: the seeds' (``trial_variance``),
    or, with a study of at least two scored trials, the larger of that and the study's."""
    variance = trial_variance(seed_sharpes, bars)
    if study is not None and len(study.sharpes) > 1:
        variance = max(variance, study.per_period_variance)
    return variance


def oos_frame(trades: dict[str, list[tuple[int, FoldTrades]]], seeds: Sequence[int]) -> pd.DataFrame:
    """``trades[instrument]`` = ``[(fold k, FoldTrades), ...]`` as the ``oos`` table (module docstring)."""
    parts = []
    for name, folds in trades.items():
        for k, one in folds:
            frame = pd.DataFrame({"time": one.time, "instrument": name, "fold": k})
            for seed in seeds:
                frame[f"seed_{seed}"] = one.seeds[seed]
            frame["ensemble"] = one.ensemble
            for base in BASELINES:
                frame[base] = one.baselines[base]
            parts.append(frame)
    return pd.concat(parts, ignore_index=True)


def series_columns(seeds: Sequence[int]) -> list[str]:
    return [f"seed_{s}" for s in seeds] + ["ensemble", *BASELINES]


def basket(oos: pd.DataFrame, seeds: Sequence[int]) -> pd.DataFrame:
    """Per stamp (oldest first): ``fold`` and every series, the instruments' equal-weight mean."""
    columns = series_columns(seeds)
    if oos["instrument"].nunique() == 1:
        return oos[["time", "fold", *columns]].reset_index(drop=True)
    count = oos["instrument"].nunique()
    sums = oos.groupby("time", sort=True)[columns].sum() / count
    folds = oos.groupby("time", sort=True)["fold"].first()
    return pd.concat([folds, sums], axis=1).reset_index()


def figures(r: np.ndarray, periods_per_year: float) -> dict[str, Optional[float]]:
    """Annualised return, annualised Sharpe and max drawdown (fractions) of returns ``r [T]``."""
    r = np.asarray(r, dtype=np.float64)
    total = float(np.prod(1.0 + r) - 1.0)
    return {"total_return": total, "annual_return": _plain(annualised_return(r, periods_per_year)),
            "sharpe": _plain(annualised_sharpe(r, periods_per_year)), "max_drawdown": _plain(max_drawdown(r))}


def _plain(value: Any) -> Optional[float]:
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def edge_figures(v: Any) -> dict[str, Any]:
    """The verdict's headline figures, flat (``p_value``, ``excess_annual``, ``ci_low``, ``ci_high``, ...)."""
    names = ("shown", "p_value", "excess_annual", "ci_low", "ci_high", "sharpe_diff", "sharpe_diff_ci",
             "sharpe_diff_p", "psr_zero", "psr_benchmark", "dsr", "block_length", "n_trials")
    return {name: (list(getattr(v, name)) if name == "sharpe_diff_ci" else getattr(v, name)) for name in names}


@dataclass
class Verdict:
    """The verdict of the stitched ensemble against buy-and-hold, and what went into it."""

    result: Any  # ppo_lstm.stats.EdgeVerdict
    n_trials: int
    trial_sharpes: list[float]


def verdict_of(series: pd.DataFrame, seeds: Sequence[int], periods_per_year: float,
               wf: WalkForwardConfig, study: Optional[StudyTrials] = None) -> Verdict:
    """``edge_verdict`` of the ensemble over buy-and-hold on the stitched ``series`` (a :func:`basket`)."""
    bench = series["buy_and_hold"].to_numpy()
    sharpes = [per_period_sharpe(series[f"seed_{s}"].to_numpy() - bench) for s in seeds]
    trial_sharpes = [s for s in sharpes if s is not None]  # a seed identical to buy-and-hold has none
    n = trial_count(wf, study)
    result = edge_verdict(series["ensemble"].to_numpy(), bench, periods_per_year, n_trials=n,
                          trial_sharpes=trial_sharpes,
                          trial_sharpe_variance=trial_variance_of(trial_sharpes, len(bench), study),
                          alpha=ALPHA, reps=BOOTSTRAP_REPS, seed=0)
    return Verdict(result, n, trial_sharpes)
