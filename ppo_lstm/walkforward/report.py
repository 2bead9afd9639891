"""The walk-forward's outputs under ``--out``: ``walkforward.csv`` (one row per fold x
seed x instrument, the ensemble's rows too), ``oos_returns.csv`` (per bar, per seed, the
ensemble and the baselines), ``summary.json``, ``report.md`` (the verdict and tables) and
``report.png`` (stitched equity curves with the fold boundaries).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from ..rundir.checkpoint import atomic_write_bytes
from .results import Verdict, basket, edge_figures, figures, series_columns
from .trading import BASELINES

LABELS = {"ensemble": "seed ensemble", "buy_and_hold": "buy-and-hold", "flat": "flat (cash)",
          "ma_10_40": "MA 10/40 crossover"}
RULE = ("`shown` needs the ensemble's alpha over buy-and-hold (the intercept of its per-bar P&L over each fold's "
        "starting equity regressed on buy-and-hold's, on the same bars) to be positive with a one-sided Newey-West "
        "p-value below 5 %, confirmed by a stationary bootstrap of the intercept (p below 5 %), and, with more than "
        "one trial, a Deflated Sharpe Ratio of the hedged returns (return minus beta times buy-and-hold's) above 0.95. "
        "Being out of a falling market, short in one, or any fixed exposure has an alpha of 0 and is never `shown`.")


def _write(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))


def _label(column: str) -> str:
    return LABELS.get(column, column.replace("seed_", "seed "))


def fold_rows(oos: pd.DataFrame, folds: Sequence[Any], calendar: np.ndarray, seeds: Sequence[int],
              periods_per_year: float) -> pd.DataFrame:
    """``walkforward.csv``: per fold, instrument and seed (and the ensemble), the dates and the
    agent's and every baseline's figures on the fold's test bars."""
    rows = []
    for (name, k), part in oos.groupby(["instrument", "fold"], sort=False):
        fold = folds[k - 1]
        base = {"fold": k, "instrument": name, "train_start": _iso(calendar[fold.train_lo]),
                "train_end": _iso(calendar[fold.train_hi - 1]), "test_start": _iso(part["time"].iloc[0]),
                "test_end": _iso(part["time"].iloc[-1]), "test_bars": len(part)}
        baselines = {}
        for column in BASELINES:
            for key, value in figures(part[column].to_numpy(), periods_per_year).items():
                baselines[f"{column}_{key}"] = value
        for column in [f"seed_{s}" for s in seeds] + ["ensemble"]:
            agent = {f"agent_{key}": value for key, value in figures(part[column].to_numpy(),
                                                                     periods_per_year).items()}
            rows.append({**base, "seed": column.replace("seed_", ""), **agent, **baselines})
    return pd.DataFrame(rows)


def figures_table(series: pd.DataFrame, seeds: Sequence[int], periods_per_year: float) -> dict[str, dict[str, Any]]:
    """Overall and per-fold figures of every stitched series: ``{column: {"overall": ..., "folds": {k: ...}}}``."""
    out = {}
    for column in series_columns(seeds):
        out[column] = {"overall": figures(series[column].to_numpy(), periods_per_year),
                       "folds": {int(k): figures(part[column].to_numpy(), periods_per_year)
                                 for k, part in series.groupby("fold")}}
    return out


def summary_dict(settings: dict[str, Any], folds: Sequence[Any], calendar: np.ndarray, table: dict[str, Any],
                 verdict: Verdict, periods_per_year: float, instruments: Sequence[str],
                 sections: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``summary.json``; ``sections`` adds named parts (per-instrument alphas, costs, agreement)."""
    seeds = [c for c in table if c.startswith("seed_")]
    sharpes = [table[c]["overall"]["sharpe"] for c in seeds]
    known = [s for s in sharpes if s is not None]
    return {
        "verdict": verdict.result.line(), "shown": bool(verdict.result.shown),
        "edge": edge_figures(verdict.result), "statistics": verdict.result.as_dict(), "n_trials": verdict.n_trials,
        "trial_alpha_sharpes_per_period": verdict.trial_sharpes, "spa": verdict.spa.as_dict(),
        "periods_per_year": periods_per_year,
        "instruments": list(instruments), "settings": settings,
        "folds": [{"fold": f.k, "train_start": _iso(calendar[f.train_lo]), "train_end": _iso(calendar[f.train_hi - 1]),
                   "test_start": _iso(calendar[f.test_lo]), "test_end": _iso(calendar[f.test_hi - 1])} for f in folds],
        "seed_sharpe_spread": {"min": min(known) if known else None, "max": max(known) if known else None,
                               "std": float(np.std(known, ddof=1)) if len(known) > 1 else None,
                               "seeds": len(seeds), "with_sharpe": len(known)},
        "figures": table, **(sections or {}),
    }


def spread_line(spread: dict[str, Any]) -> str:
    """The report's line on the seeds' Sharpe ratios; a seed whose stitched returns are constant (one
    that stayed flat) has none, and the line then says how many have one."""
    seeds, known = spread.get("seeds"), spread.get("with_sharpe")
    if seeds is None or known == seeds:  # every seed has one (summaries written before the counts: as they were)
        return (f"Spread of the seeds' Sharpe ratios: {_num(spread['min'])} to {_num(spread['max'])} "
                f"(std {_num(spread['std'])}).")
    flat = f"{seeds - known} of {seeds} seeds have constant returns (flat) and no Sharpe ratio"
    if known == 0:
        return f"Spread of the seeds' Sharpe ratios: none; all {seeds} seeds have constant returns (flat)."
    if known == 1:
        return f"Sharpe ratio of the one seed whose returns vary: {_num(spread['min'])} ({flat})."
    return (f"Spread of the Sharpe ratios of the {known} seeds whose returns vary: {_num(spread['min'])} to "
            f"{_num(spread['max'])} (std {_num(spread['std'])}; {flat}).")


def _pct(value: Optional[float], signed: bool = True) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{100 * value:+.2f} %" if signed else f"{100 * value:.2f} %"


def _num(value: Optional[float]) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _sig(value: Optional[float]) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def statistics_lines(edge: dict[str, Any]) -> list[str]:
    """The verdict's figures as a table: what decides it first, then the descriptions."""
    trials = f"{edge['n_trials']} trial{'s' if edge['n_trials'] != 1 else ''}"
    return ["| statistic | value |", "|---|---|",
            f"| alpha over buy-and-hold, a year | {_pct(edge['alpha_annual'])} |",
            f"| its one-sided 95 % lower bound (Newey-West, {edge['hac_lags']} lags) | {_pct(edge['lower_annual'])} |",
            f"| one-sided p-value (alpha <= 0), Newey-West | {_sig(edge['p_value'])} |",
            f"| one-sided p-value (alpha <= 0), stationary bootstrap | {_sig(edge['bootstrap_p_value'])} |",
            f"| beta (exposure to buy-and-hold) | {_num(edge['beta'])} |",
            f"| Deflated Sharpe Ratio of the hedged returns | {_sig(edge['dsr'])} ({trials}) |",
            f"| mean excess return over buy-and-hold, a year (description) | {_pct(edge['excess_annual'])} "
            f"(p {_sig(edge['excess_p_value'])}) |",
            f"| Sharpe difference, annualised (description) | {_sig(edge['sharpe_diff'])} "
            f"(p {_sig(edge['sharpe_diff_p'])}) |",
            f"| Probabilistic Sharpe Ratio against 0 (description) | {_sig(edge['psr_zero'])} |",
            f"| bootstrap mean block length, bars | {_sig(edge['block_length'])} |",
            "", "The descriptions mix timing with exposure (out of a falling market, excess return is high "
                "without any skill); they decide nothing."]


def spa_lines(spa: dict[str, Any]) -> list[str]:
    """Hansen's SPA test of every strategy looked at, in words and figures."""
    names = [_label(n) for n in spa["strategies"]]
    question = (f"Does {names[0]} have" if len(names) == 1 else
                f"Does the best of {', '.join(names)} have" if names else "Does any strategy have")
    lines = ["", "## Best of many: Hansen's SPA test", "",
             f"{question} a positive alpha over buy-and-hold, after looking at all of them? p = "
             f"{_sig(spa['p_consistent'])} (consistent; lower {_sig(spa['p_lower'])}, upper {_sig(spa['p_upper'])}; "
             f"{spa['reps']} stationary-bootstrap draws)."]
    if spa["best"]:
        lines[-1] += f" The largest alpha is {_label(spa['best'])}'s."
    if spa["fixed_exposures"]:
        lines.append(f"Left out as fixed exposures (alpha 0 by construction): "
                     f"{', '.join(_label(n) for n in spa['fixed_exposures'])}.")
    return lines


def instrument_lines(alphas: dict[str, dict[str, Any]]) -> list[str]:
    """With several instruments, each one's alpha (the ensemble over its own buy-and-hold)."""
    if len(alphas) < 2:
        return []
    lines = ["", "## Alpha per instrument (the ensemble over the instrument's buy-and-hold)", "",
             "| instrument | alpha a year | one-sided 95 % lower bound | p | beta |", "|---|---|---|---|---|"]
    for name, a in alphas.items():
        lines.append(f"| {name} | {_pct(a['alpha_annual'])} | {_pct(a['lower_annual'])} | {_sig(a['p_value'])} | "
                     f"{_num(a['beta'])} |")
    return lines


def report_markdown(summary: dict[str, Any], command: str, sections: Sequence[str] = ()) -> str:
    """``report.md``: the verdict line, the rule, the statistics and the tables; ``sections``
    (markdown lines: costs, agreement) go before the closing list of files."""
    edge, table = summary["edge"], summary["figures"]
    lines = ["# Walk-forward report", "", f"**{summary['verdict']}**", "", RULE, "",
             f"Command: `{command}`", "",
             f"{len(summary['folds'])} folds; instruments: {', '.join(summary['instruments'])}; "
             f"{summary['periods_per_year']:g} bars a year; trials for the Deflated Sharpe Ratio: "
             f"{summary['n_trials']}.", "", "## Statistics of the ensemble against buy-and-hold", ""]
    lines += statistics_lines(edge)
    lines += spa_lines(summary["spa"])
    lines += instrument_lines(summary.get("instrument_alphas") or {})
    lines += ["", "## Overall (stitched out-of-sample bars)", "",
              "| series | total return | annual return | Sharpe | max drawdown |", "|---|---|---|---|---|"]
    for column, values in table.items():
        o = values["overall"]
        lines.append(f"| {_label(column)} | {_pct(o['total_return'])} | {_pct(o['annual_return'])} | "
                     f"{_num(o['sharpe'])} | {_pct(o['max_drawdown'], signed=False)} |")
    lines += ["", spread_line(summary["seed_sharpe_spread"]), "", "## Per fold (annual return / Sharpe)", ""]
    columns = list(table)
    lines += ["| fold | test bars from | to | " + " | ".join(_label(c) for c in columns) + " |",
              "|---|---|---|" + "---|" * len(columns)]
    for fold in summary["folds"]:
        k = fold["fold"]
        cells = []
        for c in columns:
            f = table[c]["folds"].get(k) or table[c]["folds"].get(str(k))
            cells.append(f"{_pct(f['annual_return'])} / {_num(f['sharpe'])}" if f else "-")
        lines.append(f"| {k} | {fold['test_start'][:10]} | {fold['test_end'][:10]} | " + " | ".join(cells) + " |")
    lines += list(sections)
    lines += ["", "Files: walkforward.csv (per fold, seed and instrument), oos_returns.csv (per bar), summary.json, "
                  "report.png; each job's run dir is under jobs/.", ""]
    return "\n".join(lines)


def plot_report(series: pd.DataFrame, seeds: Sequence[int], path: Path) -> bool:
    """``report.png``: the stitched equity (growth of 1) of every seed, the ensemble and buy-and-hold,
    a line at each fold's first bar. False when matplotlib is missing (the ``plot`` extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    time = pd.to_datetime(series["time"])
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for s in seeds:
        ax.plot(time, np.cumprod(1 + series[f"seed_{s}"].to_numpy()), lw=0.8, alpha=0.6, label=f"seed {s}")
    ax.plot(time, np.cumprod(1 + series["ensemble"].to_numpy()), lw=2.0, color="black", label="seed ensemble")
    ax.plot(time, np.cumprod(1 + series["buy_and_hold"].to_numpy()), lw=1.5, color="tab:gray", ls="--",
            label="buy-and-hold")
    starts = series.groupby("fold")["time"].first()
    for k, t in starts.items():
        ax.axvline(pd.Timestamp(t), color="tab:red", lw=0.7, alpha=0.5)
        ax.text(pd.Timestamp(t), ax.get_ylim()[1], f" fold {k}", va="top", fontsize=8, color="tab:red")
    ax.set_ylabel("growth of 1 (out of sample)")
    ax.set_title("Walk-forward: stitched out-of-sample equity")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return True


def write_reports(out: Path, oos: pd.DataFrame, rows: pd.DataFrame, summary: dict[str, Any], command: str,
                  seeds: Sequence[int], sections: Sequence[str] = ()) -> None:
    """Every report file under ``out`` (each written atomically); ``sections``: more of report.md."""
    frame = oos.copy()
    frame["time"] = [_iso(t) for t in frame["time"]]
    _write(out / "oos_returns.csv", frame.to_csv(index=False, float_format="%.17g"))
    _write(out / "walkforward.csv", rows.to_csv(index=False, float_format="%.10g"))
    _write(out / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
    _write(out / "report.md", report_markdown(summary, command, sections))
    plot_report(basket(oos, seeds), seeds, out / "report.png")


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.bool_):
        return bool(value)
    return str(value)


def _iso(stamp: Any) -> str:
    return pd.Timestamp(stamp).isoformat()
