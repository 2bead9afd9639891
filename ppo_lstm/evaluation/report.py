"""The outputs of a backtest: the table, the JSON object, the equity CSV and the plot.

Each takes a :class:`ppo_lstm.evaluation.backtest.BacktestResult`; the plot needs matplotlib
(the ``plot`` extra) and says so in a one-line :class:`UsageError` without it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from .backtest import BacktestResult
from ..errors import UsageError
from .plots import import_pyplot, save_png

CSV_COLUMNS = ("time", "close", "position", "equity", "buy_and_hold_equity")
# (metric key, row label, format); None prints as "-"
ROWS = (
    ("total_return_pct", "total return %", "{:.2f}"),
    ("annual_return_pct", "annual return %", "{:.2f}"),
    ("annual_volatility_pct", "annual volatility %", "{:.2f}"),
    ("sharpe", "Sharpe", "{:.2f}"),
    ("sortino", "Sortino", "{:.2f}"),
    ("calmar", "Calmar", "{:.2f}"),
    ("max_drawdown_pct", "max drawdown %", "{:.2f}"),
    ("max_drawdown_bars", "max drawdown bars", "{:d}"),
    ("trades", "trades", "{:d}"),
    ("win_rate_pct", "win rate %", "{:.1f}"),
    ("profit_factor", "profit factor", "{:.2f}"),
    ("exposure_pct", "exposure %", "{:.1f}"),
    ("fees_and_slippage_paid", "fees + slippage paid", "{:,.2f}"),
)
# simulated backtests, above ROWS: the spread of the episodes' own returns (EpisodeReturns key, label, format)
EPISODE_ROWS = (
    ("mean_return_pct", "mean return %", "{:.2f}"),
    ("std_return_pct", "std of returns %", "{:.2f}"),
    ("median_return_pct", "median return %", "{:.2f}"),
    ("p5_return_pct", "5th percentile %", "{:.2f}"),
    ("p95_return_pct", "95th percentile %", "{:.2f}"),
    ("episodes_with_gain_pct", "episodes with a gain %", "{:.1f}"),
)
DPI = 100
FIGSIZE = (11.0, 8.0)


def report_dict(result: BacktestResult) -> dict[str, Any]:
    """The JSON object: ``bars``, ``start``, ``end``, ``late_start``, ``training_bars``,
    ``training_period``, ``sample`` (:meth:`ppo_lstm.evaluation.samples.SampleSplit.as_dict`),
    ``fee_bps``, ``slippage_bps``, then, for a simulated backtest only, ``per_episode``
    (:func:`per_episode_dict`), then ``agent``, ``buy_and_hold``."""
    per_episode = per_episode_dict(result)
    return {
        "bars": result.bars,
        "start": result.start,
        "end": result.end,
        "late_start": result.late_start,
        "training_bars": result.training_bars,
        "training_period": None if result.training_period is None else list(result.training_period),
        "sample": None if result.sample is None else result.sample.as_dict(),
        **({"foreign_data": result.foreign_data} if result.foreign_data else {}),
        "fee_bps": float(result.fee_bps),
        "slippage_bps": float(result.slippage_bps),
        **({"per_episode": per_episode} if per_episode is not None else {}),
        "agent": result.agent.as_dict(),
        "buy_and_hold": result.buy_and_hold.as_dict(),
    }


def per_episode_dict(result: BacktestResult) -> Optional[dict[str, Any]]:
    """A simulated backtest's episodes one by one: ``episodes`` (N), ``episode_bars`` (L), and
    ``agent`` and ``buy_and_hold``, each :meth:`ppo_lstm.evaluation.metrics.EpisodeReturns.as_dict`
    (``mean_return_pct``, ``std_return_pct``, ``median_return_pct``, ``p5_return_pct``,
    ``p95_return_pct``, ``episodes_with_gain_pct``); None for history."""
    spread = result.per_episode()
    if spread is None:
        return None
    return {"episodes": result.episodes, "episode_bars": result.episode_length,
            "agent": spread[0].as_dict(), "buy_and_hold": spread[1].as_dict()}


def mean_report(results: dict[str, BacktestResult]) -> dict[str, Any]:
    """The equal-weight mean over instruments: ``instruments`` (their count), ``agent`` and
    ``buy_and_hold`` (each figure's mean over the instruments where it is defined; None where
    it is defined for none)."""
    out: dict[str, Any] = {"instruments": len(results)}
    for side in ("agent", "buy_and_hold"):
        figures = [getattr(r, side).as_dict() for r in results.values()]
        means: dict[str, Optional[float]] = {}
        for key in figures[0]:
            values = [float(f[key]) for f in figures if f[key] is not None]
            means[key] = sum(values) / len(values) if values else None
        out[side] = means
    return out


def instruments_dict(results: dict[str, BacktestResult]) -> dict[str, Any]:
    """The JSON object of several instruments: ``{"instruments": {name: report_dict}, "mean": mean_report}``."""
    return {"instruments": {name: report_dict(r) for name, r in results.items()}, "mean": mean_report(results)}


# (metric key, column label, format) of the several-instruments table, agent and buy-and-hold side by side
INSTRUMENT_COLUMNS = (
    ("total_return_pct", "return %", "{:.2f}"),
    ("sharpe", "Sharpe", "{:.2f}"),
    ("max_drawdown_pct", "max DD %", "{:.2f}"),
)


def format_instruments_table(results: dict[str, BacktestResult], title: str) -> str:
    """The report of several instruments: one row per instrument (its bars, period and bars/year,
    the agent's figures beside buy-and-hold's, the agent's trades and exposure), then the
    equal-weight mean row."""
    first = next(iter(results.values()))
    lines = [title, f"  fee {first.fee_bps:g} bps, slippage {first.slippage_bps:g} bps; final positions marked to "
                    f"market at the last close (no exit costs); each instrument annualised at its own bars/year", ""]
    name_width = max(10, *(len(n) for n in results))
    head = f"  {'instrument':<{name_width}}  {'bars':>6}  {'from':<10}  {'to':<10}  {'bars/yr':>7}"
    for _, label, _ in INSTRUMENT_COLUMNS:
        head += f"  {'agent ' + label:>15}  {'B&H ' + label:>13}"
    head += f"  {'trades':>7}  {'exposure %':>10}"
    lines.append(head)

    def row(name: str, bars: str, start: str, end: str, ppy: str, agent: dict, hold: dict) -> str:
        text = f"  {name:<{name_width}}  {bars:>6}  {start:<10}  {end:<10}  {ppy:>7}"
        for key, _, fmt in INSTRUMENT_COLUMNS:
            text += f"  {_cell(agent[key], fmt):>15}  {_cell(hold[key], fmt):>13}"
        return text + f"  {_cell(agent['trades'], '{:.0f}'):>7}  {_cell(agent['exposure_pct'], '{:.1f}'):>10}"

    for name, r in results.items():
        lines.append(row(name, str(r.bars), (r.start or "")[:10], (r.end or "")[:10], f"{r.periods_per_year:g}",
                         r.agent.as_dict(), r.buy_and_hold.as_dict()))
    mean = mean_report(results)
    lines.append(row(f"mean of {len(results)}", "", "", "", "", mean["agent"], mean["buy_and_hold"]))
    notes = [f"  {name}: {line}" for name, r in results.items() for line in notes_of(r)]
    return "\n".join(lines + ([""] + notes if notes else []))


def notes_of(result: BacktestResult) -> list[str]:
    """The report's lines on where trading starts (when later than asked) and on which of the
    bars training and the choice of ``best.pt`` read (:mod:`ppo_lstm.evaluation.samples`)."""
    notes = [result.late_start] if result.late_start else []
    if result.foreign_data:
        notes.append(result.foreign_data)
    return notes + ([] if result.sample is None else result.sample.lines())


def write_instruments_csv(results: dict[str, BacktestResult], path: Path) -> None:
    """Several instruments' curves in one CSV: :func:`equity_frame`'s rows of each instrument in
    turn, with an ``instrument`` column first; UsageError if it cannot be written."""
    frames = [equity_frame(r).assign(instrument=name) for name, r in results.items()]
    frame = pd.concat(frames, ignore_index=True)[["instrument", *CSV_COLUMNS]]
    try:
        frame.to_csv(path, index=False)
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None


def _cell(value: Optional[float | int], fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def format_table(result: BacktestResult, title: str) -> str:
    """The report: ``title``, a line of what was traded, then each figure for the agent and buy-and-hold.

    A simulated backtest leads with the spread of the episodes' own returns (:data:`EPISODE_ROWS`),
    then gives the figures of the chained account under a line that says so."""
    if result.simulated:
        span = f"{result.bars} bars (chained simulated episodes, {result.periods_per_year:g} bars/year assumed)"
    else:
        span = (f"{result.bars} bars traded from the close of {result.start} to {result.end} "
                f"({result.periods_per_year:g} bars/year)")
    lines = [title, f"  {span}; fee {result.fee_bps:g} bps, slippage {result.slippage_bps:g} bps",
             "  final positions marked to market at the last close (no exit costs)",
             *(f"  {note}" for note in notes_of(result)), ""]
    spread = result.per_episode()
    label_width = max(len(label) for _, label, _ in ROWS + (EPISODE_ROWS if spread else ()))
    head = f"  {'':<{label_width}}  {'agent':>12}  {'buy & hold':>12}"

    def rows(agent: dict, hold: dict, which: tuple) -> list[str]:
        return [f"  {label:<{label_width}}  {_cell(agent[key], fmt):>12}  {_cell(hold[key], fmt):>12}"
                for key, label, fmt in which]

    if spread is not None:
        n = result.episodes
        lines += [f"  per episode: each of the {n} episodes of {result.episode_length} bars on its own, "
                  f"from the starting cash", head, *rows(spread[0].as_dict(), spread[1].as_dict(), EPISODE_ROWS),
                  "", f"  chained: the {n} episodes as one account, each from the equity the one before ended with "
                  f"(returns compound)", head]
    else:
        lines.append(head)
    return "\n".join(lines + rows(result.agent.as_dict(), result.buy_and_hold.as_dict(), ROWS))


def equity_frame(result: BacktestResult) -> pd.DataFrame:
    """``[T+1]`` rows of ``time, close, position, equity, buy_and_hold_equity``.

    Row 0 is the first decision bar: flat (position 0), both equities the starting cash.
    Row t is the t-th bar traded: the lots held during it and the equities at its close.
    ``time`` is an ISO timestamp (history) or the bar number (simulated).
    """
    time: Any = result.time if result.simulated else pd.DatetimeIndex(result.time).map(pd.Timestamp.isoformat)
    return pd.DataFrame({
        "time": time,
        "close": result.close,
        "position": np.concatenate(([0], result.position)).astype(np.int64),
        "equity": result.equity,
        "buy_and_hold_equity": result.buy_and_hold_equity,
    }, columns=list(CSV_COLUMNS))


def write_equity_csv(result: BacktestResult, path: Path) -> None:
    """Write :func:`equity_frame` to ``path`` (floats at full precision); UsageError if it cannot."""
    try:
        equity_frame(result).to_csv(path, index=False)
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None


def _drawdown_pct(equity: np.ndarray) -> np.ndarray:
    """``[T+1]``: 100 (equity / running peak - 1), <= 0."""
    return 100.0 * (equity / np.maximum.accumulate(equity) - 1.0)


def trade_marks(position: np.ndarray, episode_length: Optional[int] = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (``1..T`` of the ``[T+1]`` curves) where a long is entered, a short is entered,
    and a position is exited (to flat or reversed), from ``position [T]``. With
    ``episode_length`` L, every L-th bar starts an episode from flat."""
    new = np.asarray(position, dtype=np.float64)
    old = np.concatenate(([0.0], new[:-1]))
    if episode_length:
        old[::episode_length] = 0.0
    side, was = np.sign(new), np.sign(old)
    entered = (side != 0) & (side != was)
    exited = (was != 0) & (side != was)
    return np.flatnonzero(entered & (side > 0)) + 1, np.flatnonzero(entered & (side < 0)) + 1, \
        np.flatnonzero(exited) + 1


def _draw_price(ax: Any, x: Any, result: BacktestResult) -> None:
    """The close against ``x``; simulated episodes (each its own path and price level) as
    separate segments on a log scale, dotted lines at their starts."""
    if not result.simulated or result.episode_length is None:
        ax.plot(x, result.close, color="0.35", linewidth=0.9, label="close")
        return
    L = result.episode_length
    for k, first in enumerate(range(0, len(result.close) - 1, L)):
        rows = slice(first + 1 if k else 0, first + L + 1)  # episode k: rows kL+1..(k+1)L (row 0 starts the first)
        ax.plot(x[rows], result.close[rows], color="0.35", linewidth=0.9, label="close" if k == 0 else None)
        if k:
            ax.axvline(first + 0.5, color="0.6", linewidth=0.6, linestyle=":")
    ax.set_yscale("log")


def plot(result: BacktestResult, title: str, out: Path) -> None:
    """Three panels on one time axis: price with entries and exits, equity against buy-and-hold,
    drawdown. Writes the PNG ``out``; UsageError without matplotlib or when it cannot write."""
    plt = import_pyplot()
    x = np.arange(len(result.close)) if result.simulated else pd.DatetimeIndex(result.time)
    fig, (price, equity, drawdown) = plt.subplots(3, 1, figsize=FIGSIZE, dpi=DPI, sharex=True,
                                                  gridspec_kw={"height_ratios": [2, 2, 1]})
    try:
        _draw_price(price, x, result)
        longs, shorts, exits = trade_marks(result.position, result.episode_length)
        price.scatter(x[longs], result.close[longs], marker="^", color="tab:green", s=22, zorder=3,
                      label="enter long")
        price.scatter(x[shorts], result.close[shorts], marker="v", color="tab:red", s=22, zorder=3,
                      label="enter short")
        price.scatter(x[exits], result.close[exits], marker="x", color="black", s=16, zorder=3, label="exit")
        price.set_ylabel("price")
        price.set_title("Price (marks on the bar whose open filled the trade)"
                        + (": chained simulated episodes" if result.simulated else ""), fontsize=10)
        equity.plot(x, result.equity, color="C0", linewidth=1.2, label="agent")
        equity.plot(x, result.buy_and_hold_equity, color="C1", linewidth=1.0, linestyle="--", label="buy and hold")
        equity.set_ylabel("equity")
        equity.set_title("Equity", fontsize=10)
        for curve, color, name in ((result.equity, "C0", "agent"), (result.buy_and_hold_equity, "C1", "buy and hold")):
            drawdown.plot(x, _drawdown_pct(curve), color=color, linewidth=1.0, label=name)
        drawdown.fill_between(x, _drawdown_pct(result.equity), 0.0, color="C0", alpha=0.2)
        drawdown.set_ylabel("%")
        drawdown.set_title("Drawdown", fontsize=10)
        drawdown.set_xlabel("bar" if result.simulated else "time")
        for ax in (price, equity, drawdown):
            ax.grid(True, linewidth=0.4, alpha=0.5)
            ax.tick_params(labelsize=8)
            ax.legend(fontsize=7, loc="best")
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        save_png(fig, out)
    finally:
        plt.close(fig)
