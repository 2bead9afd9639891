"""The out-of-sample returns of a walk-forward, stitched, and every figure and the verdict.

``oos`` (one row per instrument and scored bar, oldest first): ``time``, ``instrument``,
``fold``, ``seed_<s>`` per seed, ``ensemble`` and the baselines (simple per-bar returns).
With several instruments the verdict is about the equal-weight basket: at each stamp the
mean of the instruments' returns (an instrument without a bar there counts 0), i.e. cash
split equally among them and rebalanced every bar.

The verdict (:func:`verdict_of`) is the seed ensemble's against buy-and-hold, on the per-bar
P&L over each fold's starting equity (:func:`on_starting_capital`), where a position held
unchanged is an exact multiple of buy-and-hold. Its trial count is :func:`trial_count`, the
one place that counts trials.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

import numpy as np
import pandas as pd

from ..stats import (SpaResult, alpha_test, annualised_return, annualised_sharpe, edge_verdict, max_drawdown,
                     rescaled_variance, seed_trial_sharpes, spa_test)
from .config import WalkForwardConfig
from .trading import BASELINES, FoldTrades

ALPHA = 0.05


class StudyTrials(Protocol):
    """What the verdict takes from a tuning study (``ppo_lstm.tune.study_stats.TrialStats``):
    the configurations tried, and the per-bar Sharpe ratios of the finished trials' hedged
    hold-out returns with the number of hold-out bars they were measured over."""

    trials: int
    alpha_sharpes: tuple[float, ...]
    holdout_bars: int


BOOTSTRAP_REPS = 2000
SPA_REPS = 1000


def on_starting_capital(r: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """Per-bar P&L over the fold's starting equity ``[T]``, from simple returns ``r [T]`` and fold numbers
    ``fold [T]`` (each fold a fresh account): ``(E_t - E_{t-1}) / E_0 = r_t prod_{j<t} (1 + r_j)``.

    The engine trades fixed units per lot, so a position held unchanged is a fixed dollar exposure:
    its P&L is an exact multiple of buy-and-hold's in these units, while its simple returns are not
    (a short's weight in its equity grows as the price rises). The verdict's regression is in these units.
    """
    r, fold = np.asarray(r, dtype=np.float64), np.asarray(fold)
    out = np.empty_like(r)
    starts = np.flatnonzero(np.r_[True, fold[1:] != fold[:-1]])
    for lo, hi in zip(starts, np.r_[starts[1:], r.size]):
        growth = np.cumprod(1.0 + r[lo:hi])
        out[lo:hi] = r[lo:hi] * np.r_[1.0, growth[:-1]]
    return out


def capital_frame(oos: pd.DataFrame, seeds: Sequence[int]) -> pd.DataFrame:
    """``oos`` with every series in :func:`on_starting_capital` units, per instrument and fold."""
    out = oos.copy()
    for _, part in oos.groupby("instrument", sort=False):
        for column in series_columns(seeds):
            out.loc[part.index, column] = on_starting_capital(part[column].to_numpy(), part["fold"].to_numpy())
    return out


def trial_count(wf: WalkForwardConfig, study: Optional[StudyTrials] = None) -> int:
    """The Deflated Sharpe Ratio's number of trials: seeds x the configurations tried.

    The configurations are ``--configs-tried``; with ``--study``, the study's finished trials
    plus ``--configs-tried - 1`` tried outside it (the tuned configuration is one of the trials).
    """
    configurations = wf.configs_tried if study is None else study.trials + wf.configs_tried - 1
    return wf.seeds * max(configurations, 1)


def study_variance(study: Optional[StudyTrials], bars: int) -> Optional[float]:
    """The spread of the study's hedged hold-out Sharpe ratios, rescaled to ``bars`` test bars
    (:func:`ppo_lstm.stats.rescaled_variance`); None without a study or with fewer than 2 of them."""
    if study is None:
        return None
    return rescaled_variance(study.alpha_sharpes, study.holdout_bars, bars)


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


def instrument_alphas(capital: pd.DataFrame, periods_per_year: float) -> dict[str, dict[str, Any]]:
    """Per instrument, the HAC alpha test of the ensemble over that instrument's buy-and-hold
    (``capital``: a :func:`capital_frame`)."""
    return {str(name): alpha_test(part["ensemble"].to_numpy(), part["buy_and_hold"].to_numpy(),
                                  periods_per_year).as_dict()
            for name, part in capital.groupby("instrument", sort=False)}


def edge_figures(v: Any) -> dict[str, Any]:
    """The verdict's headline figures, flat: the alpha test's, the bootstrap's p, the DSR."""
    a = v.alpha
    return {"shown": v.shown, "alpha_annual": a.alpha_annual, "lower_annual": a.lower_annual, "p_value": a.p_value,
            "bootstrap_p_value": v.bootstrap.p_value, "bootstrap_lower_annual": v.bootstrap.lower_annual,
            "beta": a.beta, "hac_lags": a.lags, "excess_annual": None if v.excess is None else v.excess.estimate,
            "excess_p_value": None if v.excess is None else v.excess.p_value,
            "sharpe_diff": None if v.sharpe_difference is None else v.sharpe_difference.estimate,
            "sharpe_diff_p": None if v.sharpe_difference is None else v.sharpe_difference.p_value,
            "psr_zero": v.psr_zero, "dsr": v.dsr, "trial_sharpe_variance": v.trial_sharpe_variance,
            "block_length": v.bootstrap.block_length, "n_trials": v.n_trials}


@dataclass
class Verdict:
    """The verdict of the stitched ensemble against buy-and-hold, and what went into it."""

    result: Any  # ppo_lstm.stats.EdgeVerdict
    n_trials: int
    trial_sharpes: list[float]  # per bar, the seeds' hedged returns' Sharpe ratios
    spa: SpaResult


def verdict_of(series: pd.DataFrame, seeds: Sequence[int], periods_per_year: float,
               wf: WalkForwardConfig, study: Optional[StudyTrials] = None) -> Verdict:
    """``edge_verdict`` of the ensemble over buy-and-hold on the stitched ``series`` (the :func:`basket`
    of a :func:`capital_frame`), and the SPA test of the seeds, the ensemble and MA 10/40."""
    bench = series["buy_and_hold"].to_numpy()
    trial_sharpes = seed_trial_sharpes([series[f"seed_{s}"].to_numpy() for s in seeds], bench)
    n = trial_count(wf, study)
    result = edge_verdict(series["ensemble"].to_numpy(), bench, periods_per_year, n_trials=n,
                          trial_sharpes=trial_sharpes, extra_trial_variance=study_variance(study, len(bench)),
                          level=ALPHA, reps=BOOTSTRAP_REPS, seed=0)
    strategies = {f"seed_{s}": series[f"seed_{s}"].to_numpy() for s in seeds}
    strategies.update(ensemble=series["ensemble"].to_numpy(), ma_10_40=series["ma_10_40"].to_numpy())
    return Verdict(result, n, trial_sharpes, spa_test(bench, strategies, reps=SPA_REPS, seed=0))
