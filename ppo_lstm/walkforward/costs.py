"""Cost sensitivity of the seed ensemble: its turnover, and the fee at which its alpha stops being shown.

The ensemble's positions on the test bars (``FoldTrades.ensemble_positions``) are traded again
by a :class:`~ppo_lstm.walkforward.policies.RulePolicy` through the same backtest engine at
another ``fee_bps``: the same orders, filled at the same opens with the same slippage, only
the fees differ (slippage stays as configured). Buy-and-hold runs in the same backtest and pays
the same fee on its one entry per fold, so it is re-priced alike: it pays more on each fold's
first bar, and its later gains and losses, the same in money, are a slightly larger share of
its equity.

* **Turnover** (:func:`turnover_of`): the value traded at each bar's open as a fraction of the
  equity before it (a full entry and a full exit count 1 each), its mean per bar and a year.
* **Break-even fee**: the fee per side (bps) at which the one-sided 95 % lower bound of the
  alpha over buy-and-hold (:func:`ppo_lstm.stats.alpha.alpha_test`) reaches 0, in the verdict's
  units (``results.on_starting_capital``: each bar's P&L over its fold's starting equity): found between the
  cost paid and :data:`CAP_BPS` by stepping up :data:`GRID_BPS` and then bisecting to
  :data:`TOLERANCE_BPS`; "below the cost paid" when the bound is already <= 0 there, "above the
  cap" when it is still > 0 at :data:`CAP_BPS`.

With several instruments the figures are the equal-weight basket's (at each stamp the mean of
the instruments' P&L and turnovers, an instrument without a bar there counting 0), as in
``results.basket``: the basket is what the verdict's alpha is about.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from envs.config import EnvConfig
from envs.data import MarketData
from envs.data.instruments import instrument_name

from ..stats.alpha import AlphaTest, alpha_test
from .policies import RulePolicy
from .trading import FoldTrades, trade

CAP_BPS = 1000.0  # 10 % a side: no strategy here trades at that
TOLERANCE_BPS = 0.1
GRID_BPS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, CAP_BPS)


@dataclass(frozen=True)
class Leg:
    """One fold on one instrument: ``data``'s scored bars ``a..b-1`` and the ensemble's positions ``[b-a]``."""

    name: str
    data: MarketData
    a: int
    b: int
    positions: np.ndarray


def legs_of(trades: dict[str, list[tuple[int, FoldTrades]]], datas: Sequence[MarketData]) -> Optional[list[Leg]]:
    """Every (instrument, fold) of ``trades`` as a :class:`Leg`; None when a fold lacks the ensemble's positions."""
    legs = []
    for data in datas:
        name = instrument_name(data.source)
        for _, one in trades[name]:
            if one.ensemble_positions is None:
                return None
            a = int(np.searchsorted(data.timestamps, one.time[0], side="left"))
            b = a + len(one.time)
            if not np.array_equal(data.timestamps[a:b], one.time):
                raise ValueError(f"{name}: the traded bars are not consecutive bars of the data")
            legs.append(Leg(name, data, a, b, np.asarray(one.ensemble_positions, dtype=np.int64)))
    return legs


def turnover_of(equity: np.ndarray, position: np.ndarray, opens: np.ndarray, first_close: float,
                max_position: int) -> np.ndarray:
    """Value traded at each bar's open over the equity before it, ``[T]``, of a backtest's ``equity [T+1]``
    and ``position [T]`` (lots held during each bar, from flat), ``opens [T]`` of those bars; a lot is
    ``initial cash / (K * first_close)`` units (``first_close``: the first decision bar's close)."""
    position = np.asarray(position, dtype=np.float64)
    lots = np.abs(np.diff(position, prepend=0.0))
    before = np.asarray(equity, dtype=np.float64)[:-1] / equity[0]  # equity / initial cash before each bar
    value = lots / max_position * np.asarray(opens, dtype=np.float64) / first_close  # traded value / initial cash
    return np.divide(value, before, out=np.zeros_like(value), where=before > 0)


def _basket(legs: Sequence[Leg], columns: dict[str, list[np.ndarray]]) -> pd.DataFrame:
    """Per stamp (oldest first) each column's equal-weight mean over the instruments; ``columns[c][i]``
    ``[b-a]`` belongs to ``legs[i]``."""
    frame = pd.DataFrame({"time": np.concatenate([leg.data.timestamps[leg.a:leg.b] for leg in legs]),
                          **{c: np.concatenate(parts) for c, parts in columns.items()}})
    count = len({leg.name for leg in legs})
    if count == 1:
        return frame
    return (frame.groupby("time", sort=True)[list(columns)].sum() / count).reset_index()


def reprice(legs: Sequence[Leg], env: EnvConfig, fee_bps: float, slippage_bps: Optional[float] = None
            ) -> pd.DataFrame:
    """The basket's per-stamp ``ensemble`` and ``buy_and_hold`` P&L over each fold's starting equity and
    ``turnover``, ``[T]`` each, with the legs' positions traded at ``fee_bps`` per side (and
    ``slippage_bps``, default the env's)."""
    priced = dataclasses.replace(env, fee_bps=float(fee_bps),
                                 slippage_bps=env.slippage_bps if slippage_bps is None else float(slippage_bps))
    columns: dict[str, list[np.ndarray]] = {"ensemble": [], "buy_and_hold": [], "turnover": []}
    for leg in legs:
        result = trade(RulePolicy(priced, leg.positions), priced, leg.data, leg.a, leg.b)
        columns["ensemble"].append(np.diff(result.equity) / result.equity[0])  # a leg is one fold: a fresh account
        columns["buy_and_hold"].append(np.diff(result.buy_and_hold_equity) / result.buy_and_hold_equity[0])
        columns["turnover"].append(turnover_of(result.equity, result.position, leg.data.open[leg.a:leg.b],
                                               float(result.close[0]), env.max_position))
    return _basket(legs, columns)


def break_even(lower: Callable[[float], float], paid: float, cap: float = CAP_BPS,
               tolerance: float = TOLERANCE_BPS) -> tuple[str, Optional[float], dict[float, float]]:
    """Where ``lower(fee)`` (the alpha's lower bound at a fee in bps) reaches 0 above ``paid``:
    ``("found", fee, tried)``, ``("below_cost_paid", None, tried)`` or ``("above_cap", None, tried)``;
    ``tried`` maps every fee evaluated on the way (the grid's, not the bisection's) to its value."""
    tried = {paid: lower(paid)}
    if tried[paid] <= 0.0:
        return "below_cost_paid", None, tried
    lo = paid
    for fee in [f for f in GRID_BPS if paid < f < cap] + ([cap] if cap > paid else []):
        tried[fee] = lower(fee)
        if tried[fee] <= 0.0:
            hi = fee
            break
        lo = fee
    else:
        return "above_cap", None, tried
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if lower(mid) > 0.0:
            lo = mid
        else:
            hi = mid
    return "found", 0.5 * (lo + hi), tried


def cost_sensitivity(trades: dict[str, list[tuple[int, FoldTrades]]], datas: Sequence[MarketData], env: EnvConfig,
                     periods_per_year: float, cap_bps: float = CAP_BPS) -> tuple[dict[str, Any], list[str]]:
    """The ensemble's turnover and break-even fee; ``trades[instrument] = [(fold k, FoldTrades), ...]`` as
    traded with ``env`` (the jobs' env settings) on ``datas``, annualised with ``periods_per_year``.

    Returns the summary (``available``, ``fee_bps``, ``slippage_bps``, ``turnover`` {``per_bar``,
    ``per_year``}, ``cost_drag_annual``, ``break_even`` {``status``, ``fee_bps``, ``cap_bps``,
    ``tolerance_bps``}, ``fees`` [{``fee_bps``, ``alpha_annual``, ``lower_annual``, ``p_value``}]; fractions,
    None where unavailable) and the report's markdown lines (a ``## ...`` section with a table).
    """
    legs = legs_of(trades, datas)
    if legs is None:
        summary: dict[str, Any] = {"available": False}
        return summary, ["", "## Costs: turnover and break-even fee", "",
                         "n/a: the ensemble's positions were not kept for every fold.", ""]
    tests: dict[float, AlphaTest] = {}
    priced: dict[float, pd.DataFrame] = {}

    def lower(fee: float) -> float:
        priced[fee] = series = reprice(legs, env, fee)
        tests[fee] = alpha_test(series["ensemble"].to_numpy(), series["buy_and_hold"].to_numpy(), periods_per_year)
        return tests[fee].lower_annual

    paid = float(env.fee_bps)
    status, fee, tried = break_even(lower, paid, cap_bps)
    at_paid, free = priced[paid], reprice(legs, env, 0.0, 0.0)
    turnover = float(at_paid["turnover"].mean())
    summary = {"available": True, "fee_bps": paid, "slippage_bps": float(env.slippage_bps),
               "turnover": {"per_bar": turnover, "per_year": turnover * periods_per_year},
               "cost_drag_annual": float(free["ensemble"].mean() - at_paid["ensemble"].mean()) * periods_per_year,
               "break_even": {"status": status, "fee_bps": fee, "cap_bps": cap_bps, "tolerance_bps": TOLERANCE_BPS},
               "fees": [{"fee_bps": f, "alpha_annual": tests[f].alpha_annual, "lower_annual": tests[f].lower_annual,
                         "p_value": tests[f].p_value} for f in sorted(tried)]}
    return summary, cost_lines(summary, len({leg.name for leg in legs}) > 1)


def _pct(value: float) -> str:
    return f"{100 * value:+.2f} %"


def _bps(value: float) -> str:
    return f"{value:g} bps"


def cost_lines(summary: dict[str, Any], basket: bool) -> list[str]:
    """The report's section for a :func:`cost_sensitivity` summary that is available."""
    paid, slip = summary["fee_bps"], summary["slippage_bps"]
    turnover, even = summary["turnover"], summary["break_even"]
    whose = "the equal-weight basket's" if basket else "the ensemble's"
    if even["status"] == "found":
        verdict = (f"**{even['fee_bps']:.1f} bps** per side (fee; plus the {_bps(slip)} slippage), found by "
                   f"bisection to {_bps(even['tolerance_bps'])}")
    elif even["status"] == "below_cost_paid":
        verdict = f"**below the cost paid**: the lower bound is already <= 0 at the {_bps(paid)} fee paid"
    else:
        verdict = f"**above {_bps(even['cap_bps'])}**: the lower bound is still > 0 there"
    lines = ["", "## Costs: turnover and break-even fee", "",
             f"Turnover ({whose}): the value traded at each bar's open as a share of the equity before it (a full "
             f"entry and a full exit count 100 % each): {100 * turnover['per_bar']:.2f} % a bar, "
             f"{turnover['per_year']:.1f} times the equity a year. At the {_bps(paid)} fee and {_bps(slip)} slippage "
             f"paid, costs took {100 * summary['cost_drag_annual']:.2f} % of the starting equity a year.", "",
             "The same positions traded again at higher fees per side, through the same backtest (same orders and "
             "fills, other fees; slippage unchanged). Buy-and-hold pays the same fee on its entry in each fold, so "
             "it is re-priced alike.", "",
             f"Break-even fee, where the alpha's one-sided 95 % lower bound reaches 0: {verdict}.", "",
             "| fee per side | alpha over buy-and-hold, a year | one-sided 95 % lower bound | p-value |",
             "|---|---|---|---|"]
    for row in summary["fees"]:
        mark = " (paid)" if row["fee_bps"] == paid else ""
        lines.append(f"| {_bps(row['fee_bps'])}{mark} | {_pct(row['alpha_annual'])} | {_pct(row['lower_annual'])} "
                     f"| {row['p_value']:.3g} |")
    return lines
