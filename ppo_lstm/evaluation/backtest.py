"""Backtests of a trained policy beside buy-and-hold, on history or on simulated markets.

Both backtests run the agent and buy-and-hold as two halves of one ``TradingCore``, so
they see the same bars, pay the same fees and slippage and trade the same lot size
(``initial_cash / (K * close of the first decision bar)`` units per lot).

Conventions (the agent and buy-and-hold alike):

* Timing is the env's: the decision taken after bar ``t`` closes fills at bar
  ``t+1``'s open (with slippage and fee) and is marked at bar ``t+1``'s close.
* ``T`` bars are scored. ``equity [T+1]``: ``equity[0]`` is the starting cash, at the
  close of the first decision bar; ``equity[t]`` is the equity marked at the close of
  the ``t``-th bar after it. ``position [T]``: the signed lots held during bar ``t``.
* Buy-and-hold targets ``+K`` lots (the largest long position the agent can take) at
  every decision, so it buys ``K`` lots at the open of the first scored bar and holds them.
* End of the run: whatever is open is **marked to market** at the last bar's close.
  No exit fill, fee or slippage is charged, and the open lots are not counted as
  closed trades (so buy-and-hold has 0 trades, and its only cost is the entry's).
* An account whose equity reaches 0 (a bust, which ends a training episode) is
  flattened at the next open and stays flat to the end of the run.

``backtest_history`` walks a slice of a file as ONE continuous episode: the LSTM state
is carried through, the first decision is taken at the close of the slice's first bar
(its first observation's window is made of the ``window`` bars before it, which are
past: no look-ahead) and the first trade fills at the next bar's open. Only where the
file holds fewer than ``window`` bars before the slice (or a feature column is not yet
defined) does the first decision come later; ``BacktestResult.late_start`` then says
why. The time feature (bars held / scale) uses the *training* episode
length as its scale and is clipped at 1 (``envs.observation``), so however long the
backtest, the agent sees the feature's training range. The normalised returns are those
of the whole file up to the slice's end, as in training: causal, and the bars before the
slice warm up the RMS of its first window.

``backtest_simulated`` plays N fresh episodes of the training length on seeded paths of
the checkpoint's market (the LSTM reset at each start, as in training) and chains their
per-bar returns into one equity curve of ``N * L`` bars; ``episode_returns_pct`` keeps each
episode's own return (from the starting cash), before the chain compounds them.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch
from gymnasium.utils import seeding

from envs.config import EnvConfig
from envs.core import TradingCore

from ..algo.agent import RecurrentActorCritic
from .engine import closed_trades, play
from .metrics import EpisodeReturns, TradingMetrics, episode_returns, trading_metrics
from .samples import SampleSplit

if TYPE_CHECKING:
    from envs.data import MarketData

# Simulated paths have no calendar; their volatility (0.5-2 % a bar) is daily-like.
SIMULATED_PERIODS_PER_YEAR = 252.0
# Entropy tag of the evaluation seeds: np.random.SeedSequence([EVAL_SEED_TAG, seed]).
EVAL_SEED_TAG = 0x4556414C  # "EVAL"


@dataclass
class BacktestResult:
    """One backtest of ``T`` bars: the agent's and buy-and-hold's curves and figures.

    ``time`` ``[T+1]``: datetime64[ns] stamps of the bars (history), or bar numbers 0..T
    (simulated); ``close``, ``equity``, ``buy_and_hold_equity`` ``[T+1]``, row 0 being the
    first decision bar; ``position`` ``[T]``: the agent's signed lots held during bars 1..T.
    Simulated: rows ``kL+1..(k+1)L`` are episode k's bars (its own path's closes), and
    ``episode_returns_pct`` / ``buy_and_hold_episode_returns_pct`` ``[N]`` are each episode's
    return in % from the starting cash, ``100 (max(equity at its end, 0) / cash - 1)``; the chained
    ``total_return_pct`` is ``100 (prod(1 + r / 100) - 1)`` of them (unless the last episode ends
    below 0, which the chain keeps).
    """

    time: np.ndarray
    close: np.ndarray
    equity: np.ndarray
    buy_and_hold_equity: np.ndarray
    position: np.ndarray
    agent: TradingMetrics
    buy_and_hold: TradingMetrics
    fee_bps: float
    slippage_bps: float
    periods_per_year: float
    simulated: bool
    episode_length: Optional[int] = None  # simulated: bars per chained episode
    late_start: Optional[str] = None  # history: why the first decision is after the slice's first bar
    training_bars: Optional[int] = None  # history: how many of the T bars lie in the checkpoint's training period
    training_period: Optional[tuple[str, str]] = None  # history: that period's first and last bar (ISO)
    sample: Optional[SampleSplit] = None  # history: how many of the T bars training and selection read
    foreign_data: Optional[str] = None  # history: why these are not the bars the checkpoint's training read
    episode_returns_pct: Optional[np.ndarray] = None  # simulated: [N] the agent's return in each episode
    buy_and_hold_episode_returns_pct: Optional[np.ndarray] = None  # simulated: [N] buy-and-hold's

    @property
    def episodes(self) -> Optional[int]:
        """N, the chained episodes; None for history."""
        return None if self.episode_returns_pct is None else int(self.episode_returns_pct.shape[0])

    def per_episode(self) -> Optional[tuple[EpisodeReturns, EpisodeReturns]]:
        """The spread of the episodes' returns, the agent's and buy-and-hold's
        (:func:`ppo_lstm.evaluation.metrics.episode_returns`); None for history."""
        if self.episode_returns_pct is None or self.buy_and_hold_episode_returns_pct is None:
            return None
        return episode_returns(self.episode_returns_pct), episode_returns(self.buy_and_hold_episode_returns_pct)

    @property
    def bars(self) -> int:
        """T, the bars scored."""
        return int(self.position.shape[0])

    @property
    def start(self) -> Optional[str]:
        """ISO timestamp of the first decision bar (row 0: the account opens at its close, the
        first trade fills at the next open); None when simulated."""
        return None if self.simulated else iso_stamp(self.time[0])

    @property
    def end(self) -> Optional[str]:
        """ISO timestamp of the last bar traded; None when simulated."""
        return None if self.simulated else iso_stamp(self.time[-1])


# ----------------------------------------------------------------------------- the public API


def first_decision_bar(data: MarketData, start: int, window: int, features: bool) -> tuple[int, Optional[str]]:
    """The first bar a backtest of ``data`` from bar ``start`` decides at: ``start`` itself when
    the file holds ``window`` bars before it (and, with ``features``, every feature column is
    defined there); else the first bar where that holds, and one line saying why."""
    first, why = start, None
    if start < window:
        first = window
        why = (f"the file has {start} bar{'s' if start != 1 else ''} before it and the {window}-bar window "
               f"needs {window}")
    if features and data.first_defined > first:
        first = data.first_defined
        why = ("a feature column is never defined" if first >= len(data) else
               f"every feature column is defined from {_iso(data, first)} on")
    if why is None:
        return first, None
    shown = _iso(data, first) if first < len(data) else "after the last bar"
    return first, f"trading starts at {shown}, not at {_iso(data, start)}: {why}"


def _iso(data: MarketData, bar: int) -> str:
    return iso_stamp(data.timestamps[bar])


def iso_stamp(stamp: object) -> str:
    """A bar's stamp as ISO text with its time of day (``2024-01-05T00:00:00``), so that an ``--end``
    written from it selects exactly up to that bar rather than its whole day."""
    import pandas as pd  # imported here, with the data: a run on a simulated market never loads pandas

    return pd.Timestamp(stamp).isoformat()


def backtest_history(agent: RecurrentActorCritic, env_config: EnvConfig, data: MarketData,
                     start: int | str | datetime.date = 0, end: Optional[int | str | datetime.date] = None,
                     greedy: bool = True, seed: int = 0, device: torch.device | str = "cpu") -> BacktestResult:
    """The agent on ``data``'s bars ``start..end-1`` as one continuous episode, beside buy-and-hold.

    ``start`` and ``end`` are bar indices, or dates (text such as ``"2017-09-01"``, a
    ``datetime.date`` or ``pd.Timestamp``), both inclusive as ``evaluate-ppo-lstm --start``
    and ``--end`` take them (an ``end`` date without a time of day includes that day).

    The first decision is taken at the close of bar ``start`` (its window: the ``window``
    bars before it) and the first trade fills at bar ``start + 1``'s open, so
    ``T = end - start - 1`` bars are scored and buy-and-hold holds from bar ``start``'s
    close to the last. When the file has fewer than ``window`` bars before ``start``, or
    (with features; ``data`` must carry them: ``load_ohlcv(..., features=...)``) a feature
    is not yet defined at ``start``, the first decision moves to the first bar where it
    can be taken, and ``late_start`` says so.

    ``env_config`` is the training env's (its ``episode_length`` is the time feature's
    scale); its costs and sizes are used as they are. ``greedy`` takes the most likely
    action, else actions are sampled from a generator seeded by ``seed``. Raises
    ``ValueError`` when fewer than 2 bars are left from the first decision bar.
    """
    start, end = _bar_bounds(data, start, end)
    if not 0 <= start < end <= len(data):
        raise ValueError(f"bars {start}..{end - 1} are not within the data's 0..{len(data) - 1}")
    W = env_config.window
    first, late = first_decision_bar(data, start, W, bool(env_config.feature_names))
    steps = end - first - 1
    if steps < 1:
        raise ValueError(f"{max(0, end - first)} bars from the first decision bar to the end; a backtest needs at "
                         f"least 2 (the first decision bar and one bar to trade)"
                         + (f" ({late})" if late else ""))
    config = replace(env_config, episode_length=steps)
    core = TradingCore(2, config, data, span=(first - W, end), time_scale=env_config.episode_length)
    core.rngs = [np.random.default_rng(0), np.random.default_rng(0)]  # one start is possible: no draw matters
    core.reset_rows(core.rows)
    units = core.ledger.units.copy()
    equity, position = play(core, agent, 1, steps, greedy, seed, device)
    bars = slice(first, end)  # the first decision bar, then the T scored bars
    opens = np.asarray(data.open[first + 1: end], dtype=np.float64)
    pnls, fees = zip(*(closed_trades(position[:, i], opens, units[i], config) for i in range(2)))
    ppy = data.periods_per_year
    return BacktestResult(
        time=np.asarray(data.timestamps[bars]), close=np.asarray(data.close[bars], dtype=np.float64),
        equity=equity[:, 0], buy_and_hold_equity=equity[:, 1], position=position[:, 0].astype(np.int64),
        agent=trading_metrics(equity[:, 0], position[:, 0], pnls[0], fees[0], ppy),
        buy_and_hold=trading_metrics(equity[:, 1], position[:, 1], pnls[1], fees[1], ppy),
        fee_bps=config.fee_bps, slippage_bps=config.slippage_bps, periods_per_year=ppy, simulated=False,
        late_start=late)


def evaluation_seeds(seed: int, episodes: int) -> list[int]:
    """``episodes`` path seeds for simulated evaluation, all >= 2**64.

    Drawn as 64-bit words from ``np.random.SeedSequence([EVAL_SEED_TAG, seed])`` and
    offset by 2**64, so they can never equal a training env's seed (32-bit words from
    ``SeedSequence([seed, rank, generation])``, see ``ppo_lstm.algo.seeding.env_seeds``).
    """
    words = np.random.SeedSequence([EVAL_SEED_TAG, seed]).generate_state(episodes, dtype=np.uint64)
    return [(1 << 64) + int(w) for w in words]


@dataclass(frozen=True)
class SimulatedRows:
    """What playing n simulated episodes gives, rows ``0..n-1`` the agent's and ``n..2n-1``
    buy-and-hold's on the same paths: ``equity [L+1, 2n]`` (row 0: the starting cash),
    ``position [L, 2n]``, the bars' ``opens [2n, L]`` and ``closes [2n, W+L+1]``, and the
    ``units [2n]`` of a lot."""

    equity: np.ndarray
    position: np.ndarray
    opens: np.ndarray
    closes: np.ndarray
    units: np.ndarray

    @property
    def episodes(self) -> int:
        return self.units.shape[0] // 2

    def halves(self) -> tuple["SimulatedRows", "SimulatedRows"]:
        """The agent's rows and buy-and-hold's, each as rows of one kind."""
        n = self.episodes
        return tuple(SimulatedRows(self.equity[:, h], self.position[:, h], self.opens[h], self.closes[h],
                                   self.units[h]) for h in (slice(0, n), slice(n, 2 * n)))  # type: ignore[return-value]

    @classmethod
    def joined(cls, parts: Sequence["SimulatedRows"]) -> "SimulatedRows":
        """The episodes of ``parts``, in order, as one play of them all gives them."""
        halves = [part.halves() for part in parts]
        rows = [[h[k] for h in halves] for k in (0, 1)]  # the agent's parts, then buy-and-hold's
        glue = lambda name, axis: np.concatenate([getattr(r, name) for r in rows[0] + rows[1]], axis=axis)  # noqa: E731
        return cls(glue("equity", 1), glue("position", 1), glue("opens", 0), glue("closes", 0), glue("units", 0))


def play_simulated(agent: RecurrentActorCritic, env_config: EnvConfig, seeds: Sequence[int], greedy: bool = True,
                   seed: int = 0, device: torch.device | str = "cpu") -> SimulatedRows:
    """One episode of ``env_config``'s market and length on the path of each of ``seeds``, by the
    agent and by buy-and-hold. Sampled actions (``greedy=False``) come from a generator seeded
    by ``seed``. Greedy, an episode's rows are the same whichever other seeds it is played with."""
    n, W, L = len(seeds), env_config.window, env_config.episode_length
    core = TradingCore(2 * n, env_config)
    for i, s in enumerate(list(seeds) * 2):  # buy-and-hold on the same paths
        core.rngs[i] = seeding.np_random(s)[0]
    core.reset_rows(core.rows)
    units = core.ledger.units.copy()
    equity, position = play(core, agent, n, L, greedy, seed, device)  # [L+1, 2n], [L, 2n]
    return SimulatedRows(equity, position, core.open[:, W + 1:].copy(), core.close.copy(), units)


def chain_simulated(rows: SimulatedRows, env_config: EnvConfig) -> BacktestResult:
    """The backtest of played episodes (:func:`backtest_simulated`): their per-bar returns chained."""
    W, L, episodes = env_config.window, env_config.episode_length, rows.episodes
    curves, metrics, per_episode = [], [], []
    for half in rows.halves():
        growth = np.maximum(half.equity[-1] / env_config.initial_cash, 0.0)
        per_episode.append(100.0 * (growth - 1.0))
        scale = np.concatenate(([1.0], np.cumprod(growth)[:-1]))  # [N] chained equity / cash at each start
        chained = np.concatenate(([env_config.initial_cash], (half.equity[1:] * scale).T.ravel()))
        pnls, fees = [], 0.0
        for k in range(episodes):
            p, f = closed_trades(half.position[:, k], half.opens[k], half.units[k], env_config)
            pnls.append(p * scale[k])
            fees += f * scale[k]
        held = half.position.T.ravel()
        curves.append((chained, held))
        metrics.append(trading_metrics(chained, held, np.concatenate(pnls), fees, SIMULATED_PERIODS_PER_YEAR))
    closes = rows.closes
    close = np.concatenate((closes[0, W:W + 1], closes[:episodes, W + 1:].ravel()))
    return BacktestResult(
        time=np.arange(episodes * L + 1, dtype=np.int64), close=close, equity=curves[0][0],
        buy_and_hold_equity=curves[1][0], position=curves[0][1].astype(np.int64), agent=metrics[0],
        buy_and_hold=metrics[1], fee_bps=env_config.fee_bps, slippage_bps=env_config.slippage_bps,
        periods_per_year=SIMULATED_PERIODS_PER_YEAR, simulated=True, episode_length=L,
        episode_returns_pct=per_episode[0], buy_and_hold_episode_returns_pct=per_episode[1])


def backtest_simulated(agent: RecurrentActorCritic, env_config: EnvConfig, episodes: int, seed: int,
                       greedy: bool = True, device: torch.device | str = "cpu") -> BacktestResult:
    """``episodes`` episodes of ``env_config``'s market and length on paths seeded by
    ``evaluation_seeds(seed, episodes)``, chained into one curve of ``episodes * L`` bars.

    Episode k's per-bar returns continue the chain: its curve is scaled by the chained
    equity at its start (as are its trade PnLs and fees), so the chained curve compounds
    like one account. An episode ending bust leaves the chain at 0 from then on.
    ``episode_returns_pct`` holds each episode's return before the chain (a bust's is -100).
    Buy-and-hold trades the same paths. Sampled actions (``greedy=False``) come from a
    generator seeded by ``seed``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    return chain_simulated(play_simulated(agent, env_config, evaluation_seeds(seed, episodes), greedy, seed, device),
                           env_config)


def _bar_bounds(data: MarketData, start: int | str | datetime.date,
                end: Optional[int | str | datetime.date]) -> tuple[int, int]:
    """``start`` and ``end`` as bar indices ``start..end-1``; dates go through
    :func:`envs.data.date_span` (ValueError, one line, for a bad date or an empty range)."""
    def is_date(value: object) -> bool:
        return isinstance(value, (str, datetime.date))  # pd.Timestamp and datetime are dates too

    for name, value in (("start", start), ("end", end)):
        if not (value is None and name == "end") and not is_date(value) and not isinstance(value, (int, np.integer)):
            raise ValueError(f"backtest_history: {name} is a bar index or a date, got {value!r}")
    lo = int(start) if not is_date(start) else None
    hi = len(data) if end is None else (int(end) if not is_date(end) else None)
    if lo is None or hi is None:
        from envs.data import date_span  # the loader's, imported with the data

        as_text = [value.isoformat() if isinstance(value, datetime.date) else value for value in (start, end)]
        span = date_span(data, as_text[0] if lo is None else None, as_text[1] if hi is None else None,
                         flags=("start", "end"))
        lo, hi = (span[0] if lo is None else lo), (span[1] if hi is None else hi)
    return lo, hi
