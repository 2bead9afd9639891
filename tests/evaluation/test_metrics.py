"""trading_metrics() on tiny series whose figures are worked out by hand in the comments."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ppo_lstm.evaluation.metrics import EpisodeReturns, TradingMetrics, episode_returns, trading_metrics

KEYS = ["total_return_pct", "annual_return_pct", "annual_volatility_pct", "sharpe", "sortino", "calmar",
        "max_drawdown_pct", "max_drawdown_bars", "trades", "win_rate_pct", "profit_factor", "exposure_pct",
        "fees_paid", "fees_and_slippage_paid"]
NO_TRADES = np.array([])


def metrics(equity: list[float], periods_per_year: float = 252.0, position: list[float] | None = None,
            trade_pnls: list[float] | None = None, fees_paid: float = 0.0) -> TradingMetrics:
    """trading_metrics() with a position of 1 lot on every bar and no trades unless given."""
    bars = len(equity) - 1
    return trading_metrics(np.array(equity, dtype=float),
                           np.ones(bars) if position is None else np.array(position, dtype=float),
                           NO_TRADES if trade_pnls is None else np.array(trade_pnls, dtype=float),
                           fees_paid, periods_per_year)


def test_fields_and_dict_keep_the_printed_order():
    assert list(TradingMetrics.__dataclass_fields__) == KEYS[:-1]
    assert list(metrics([100.0, 101.0]).as_dict()) == KEYS


def test_flat_equity():
    m = metrics([100.0, 100.0, 100.0, 100.0], position=[0, 0, 0])
    assert m.total_return_pct == 0.0
    assert m.annual_return_pct == 0.0
    assert m.annual_volatility_pct == 0.0  # every r_t is 0
    assert m.sharpe is None  # std(r) == 0
    assert m.sortino is None  # no losing bar: downside deviation 0
    assert m.calmar is None  # no drawdown
    assert m.max_drawdown_pct == 0.0
    assert m.max_drawdown_bars == 0
    assert m.exposure_pct == 0.0


def test_monotone_up():
    # r = [110/100 - 1, 132/110 - 1] = [0.1, 0.2]; mean 0.15; std (ddof=1) = 0.1/sqrt(2) = 0.0707107
    m = metrics([100.0, 110.0, 132.0], periods_per_year=1)
    assert m.total_return_pct == pytest.approx(32.0)
    assert m.annual_return_pct == pytest.approx(14.891252930)  # 100 (sqrt(1.32) - 1) = 100 (1.1489125 - 1)
    assert m.annual_volatility_pct == pytest.approx(7.0710678)  # 100 * 0.0707107 * sqrt(1)
    assert m.sharpe == pytest.approx(2.1213203)  # 0.15 / 0.0707107 = 1.5 sqrt(2)
    assert m.sortino is None  # no losing bar
    assert m.max_drawdown_pct == 0.0
    assert m.max_drawdown_bars == 0
    assert m.calmar is None


def test_constant_growth_has_no_sharpe():
    # r = 10% every bar: std is 0 up to rounding (1.1 is not exact in binary), so no Sharpe of 1e15.
    m = metrics([100.0, 110.0, 121.0, 133.1], periods_per_year=3)
    assert m.total_return_pct == pytest.approx(33.1)
    assert m.annual_return_pct == pytest.approx(33.1)  # T == periods_per_year: a year exactly
    assert m.annual_volatility_pct == pytest.approx(0.0, abs=1e-9)
    assert m.sharpe is None


def test_drawdown_that_recovers():
    # peak 120 at t=1, trough 90 at t=2 (1 - 90/120 = 25%), back to 120 at t=4.
    # Bars closing below the peak: t=2 (90), t=3 (108) -> 2; the bar reaching 120 is not counted.
    m = metrics([100.0, 120.0, 90.0, 108.0, 120.0, 126.0], periods_per_year=5)
    assert m.max_drawdown_pct == pytest.approx(25.0)
    assert m.max_drawdown_bars == 2
    assert m.total_return_pct == pytest.approx(26.0)
    assert m.annual_return_pct == pytest.approx(26.0)  # 5 bars at 5 a year: exactly one year
    assert m.calmar == pytest.approx(1.04)  # 26 / 25
    # r = [0.2, -0.25, 0.2, 1/9, 0.05]: sum 14/45, mean 14/225; downside sqrt(0.25^2 / 5) = 0.25/sqrt(5)
    # sortino = (14/225) / (0.25/sqrt(5)) * sqrt(5) = (14/225) * 20 = 56/45
    assert m.sortino == pytest.approx(1.2444444)


def test_drawdown_that_never_recovers():
    # peak 121 at t=2; 99, 88, 99 after it never get back: 3 bars, deepest 1 - 88/121 = 27.2727%
    m = metrics([100.0, 110.0, 121.0, 99.0, 88.0, 99.0])
    assert m.max_drawdown_pct == pytest.approx(27.272727)
    assert m.max_drawdown_bars == 3
    assert m.total_return_pct == pytest.approx(-1.0)


def test_longest_drawdown_need_not_be_the_deepest():
    # 20% for 1 bar (80, back to 100 at t=2), then 5% for 4 bars (95..98, still open at the end)
    m = metrics([100.0, 80.0, 100.0, 95.0, 96.0, 97.0, 98.0])
    assert m.max_drawdown_pct == pytest.approx(20.0)
    assert m.max_drawdown_bars == 4


def test_no_trades():
    m = metrics([100.0, 101.0], trade_pnls=[])
    assert m.trades == 0
    assert m.win_rate_pct is None
    assert m.profit_factor is None


def test_all_losing_trades():
    m = metrics([100.0, 92.0], trade_pnls=[-5.0, -3.0])
    assert m.trades == 2
    assert m.win_rate_pct == 0.0
    assert m.profit_factor == 0.0  # 0 won / 8 lost


def test_mixed_trades_profit_factor():
    # wins 30 + 15 = 45, losses 10 + 20 = 30, one break-even (not a win)
    m = metrics([100.0, 115.0], trade_pnls=[30.0, -10.0, 0.0, 15.0, -20.0])
    assert m.trades == 5
    assert m.win_rate_pct == pytest.approx(40.0)  # 2 of 5
    assert m.profit_factor == pytest.approx(1.5)  # 45 / 30


def test_no_losing_trade_has_no_profit_factor():
    m = metrics([100.0, 105.0], trade_pnls=[5.0, 0.0])
    assert m.win_rate_pct == pytest.approx(50.0)
    assert m.profit_factor is None


def test_exposure_counts_bars_with_any_position():
    m = metrics([100.0] * 6, position=[0, 1, -2, 0, 0.5])
    assert m.exposure_pct == pytest.approx(60.0)  # 3 of 5 bars, long or short


def test_fees_passed_through():
    m = metrics([100.0, 99.0], fees_paid=np.float32(1.25))
    assert m.fees_paid == 1.25 and type(m.fees_paid) is float


def test_annualisation_252_vs_1():
    # r = [0.1, 0.2] as in test_monotone_up
    yearly = metrics([100.0, 110.0, 132.0], periods_per_year=1)
    daily = metrics([100.0, 110.0, 132.0], periods_per_year=252)
    assert yearly.total_return_pct == daily.total_return_pct == pytest.approx(32.0)
    # growth 1.32 over 2 bars, 126 such pairs a year: ln 1.32 = 0.2776317, * 126 = 34.98160, e^34.98160 = 1.5571e15
    assert daily.annual_return_pct == pytest.approx(1.5570958e17)
    assert yearly.annual_return_pct == pytest.approx(14.891252930)
    assert daily.annual_volatility_pct == pytest.approx(112.24972)  # 7.0710678 * sqrt(252) = 100 sqrt(1.26)
    assert daily.sharpe == pytest.approx(33.674916)  # 1.5 sqrt(2) * sqrt(252) = 1.5 sqrt(504)
    # one losing bar r = [-0.05]: mean / downside = -0.05 / 0.05 = -1, times sqrt(ppy)
    assert metrics([100.0, 95.0], periods_per_year=1).sortino == pytest.approx(-1.0)
    assert metrics([100.0, 95.0], periods_per_year=252).sortino == pytest.approx(-15.874508)  # -sqrt(252)


def test_annual_return_too_large_for_a_float_is_none():
    # 32% in 2 minute bars, 252 * 390 bars a year: 1.32^49140 overflows
    m = metrics([100.0, 110.0, 132.0], periods_per_year=252 * 390)
    assert m.annual_return_pct is None
    assert m.calmar is None
    assert m.sharpe is not None


def test_single_bar():
    m = metrics([100.0, 95.0])  # r = [-0.05]
    assert m.annual_volatility_pct is None and m.sharpe is None  # need 2 returns
    assert m.sortino == pytest.approx(-math.sqrt(252))  # -0.05 / 0.05 * sqrt(252)
    assert m.max_drawdown_bars == 1


def test_no_bars():
    m = metrics([100.0])
    assert m.total_return_pct == 0.0
    assert m.annual_return_pct is None
    assert m.sortino is None
    assert m.exposure_pct is None
    assert m.max_drawdown_bars == 0


def test_wiped_out_account():
    # equity ends below 0 (the env ends the episode there): annual -100, drawdown 1 - (-10)/100 = 110%
    m = metrics([100.0, 50.0, -10.0], periods_per_year=1)
    assert m.total_return_pct == pytest.approx(-110.0)
    assert m.annual_return_pct == -100.0
    assert m.max_drawdown_pct == pytest.approx(110.0)
    assert m.max_drawdown_bars == 2
    assert m.calmar == pytest.approx(-100.0 / 110.0)
    # r = [-0.5, -1.2]: mean -0.85, std 0.7/sqrt(2) = 0.4949747 -> sharpe -1.7172593
    assert m.sharpe == pytest.approx(-1.7172593)


def test_returns_after_equity_below_zero_are_undefined():
    m = metrics([100.0, -10.0, 5.0])
    assert m.annual_volatility_pct is None and m.sharpe is None and m.sortino is None


def test_json_round_trip():
    m = metrics([100.0, 120.0, 90.0, 108.0], position=[1, 0, -1], trade_pnls=[20.0, -12.0], fees_paid=0.5)
    flat = metrics([100.0, 100.0], trade_pnls=[])
    for d in (m.as_dict(), flat.as_dict()):
        text = json.dumps(d, allow_nan=False)
        assert json.loads(text) == d
        assert all(v is None or type(v) in (int, float) for v in d.values())
    assert flat.as_dict()["sharpe"] is None


@pytest.mark.parametrize("equity, position, pnls, ppy, match", [
    ([100.0, 101.0], [1, 1], [], 252, "position"),
    ([[100.0, 101.0]], [1], [], 252, "equity"),
    ([], [], [], 252, "equity"),
    ([100.0, float("nan")], [1], [], 252, "equity"),
    ([100.0, 101.0], [1], [float("inf")], 252, "trade_pnls"),
    ([0.0, 101.0], [1], [], 252, "starting cash"),
    ([100.0, 101.0], [1], [], 0, "periods_per_year"),
])
def test_bad_inputs_raise(equity, position, pnls, ppy, match):
    with pytest.raises(ValueError, match=match):
        trading_metrics(np.array(equity), np.array(position), np.array(pnls), 0.0, ppy)


def test_the_json_key_says_what_the_figure_holds():
    """``fees_paid`` includes slippage; ``fees_and_slippage_paid`` (the table's label) says so."""
    m = metrics([100.0, 99.0], fees_paid=1.25)
    assert m.as_dict()["fees_and_slippage_paid"] == m.as_dict()["fees_paid"] == m.fees_and_slippage_paid == 1.25
    from ppo_lstm.evaluation.report import ROWS
    assert ("fees_and_slippage_paid", "fees + slippage paid", "{:,.2f}") in ROWS


def test_episode_returns_by_hand():
    # returns 4, -2, 10, 0 (%): mean 3; deviations 1, -5, 7, -3 -> sample variance 84 / 3 = 28;
    # sorted -2, 0, 4, 10: median 2; 5th percentile at rank 0.15 -> -2 + 0.15 * 2 = -1.7;
    # 95th at rank 2.85 -> 4 + 0.85 * 6 = 9.1; 2 of the 4 above 0 (a 0 is no gain)
    spread = episode_returns(np.array([4.0, -2.0, 10.0, 0.0]))
    assert spread.mean_return_pct == pytest.approx(3.0) and spread.std_return_pct == pytest.approx(math.sqrt(28.0))
    assert spread.median_return_pct == pytest.approx(2.0)
    assert spread.p5_return_pct == pytest.approx(-1.7) and spread.p95_return_pct == pytest.approx(9.1)
    assert spread.episodes_with_gain_pct == 50.0
    assert list(spread.as_dict()) == ["mean_return_pct", "std_return_pct", "median_return_pct", "p5_return_pct",
                                      "p95_return_pct", "episodes_with_gain_pct"] == list(EpisodeReturns.__dataclass_fields__)
    assert json.loads(json.dumps(spread.as_dict(), allow_nan=False)) == spread.as_dict()
    one = episode_returns(np.array([-3.5]))
    assert one.std_return_pct is None and one.mean_return_pct == one.p5_return_pct == one.p95_return_pct == -3.5
    for bad in (np.array([]), np.array([1.0, np.nan]), np.ones((2, 2))):
        with pytest.raises(ValueError, match="returns_pct"):
            episode_returns(bad)
