"""``TradingCore``: N envs stepped together, composing a market, a ledger and an observer.

The core keeps only the clock (decisions ``t`` [N] taken this episode), the per-env
generators and the state format; ``TradingEnv`` is its N=1 view and
``VectorTradingEnv`` its N-env view, so the two agree bit for bit.

* ``envs.markets.simulated`` / ``envs.markets.historical``: the prices of each episode;
* ``envs.ledger``: positions, lots, fills, fees, equity and the reward;
* ``envs.observation``: the observation at each env's current bar.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.config import EnvConfig
from envs.ledger import Ledger
from envs.markets.base import Market
from envs.markets.historical import HistoricalMarket
from envs.markets.simulated import SimulatedMarket
from envs.observation import Observer

if TYPE_CHECKING:
    from envs.data import MarketData


class TradingCore:
    """N trading envs. ``reset_rows`` starts episodes, ``step`` applies actions [N], ``observe`` reads."""

    def __init__(self, num_envs: int, config: EnvConfig, data: MarketData | None = None, *,
                 span: tuple[int, int] | None = None, time_scale: int | None = None) -> None:
        """``span``: historical episodes lie within the file's bars ``span[0]..span[1]-1``
        (``HistoricalMarket``); ``time_scale``: the time feature's scale (``Observer``).
        Both default to what training uses: the whole file, the episode length."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if span is not None and data is None:
            raise ValueError("span selects bars of historical data; pass data too")
        if config.feature_names and data is None:
            raise ValueError(f"features {config.features!r} are columns of a data file; a simulated market has "
                             f"none: pass data (--data)")
        self.n, self.config, self.L = num_envs, config, config.episode_length
        self.observer = Observer(num_envs, config, time_scale)
        self.market: Market = (SimulatedMarket(num_envs, config, self.observer.z, self.observer.feat) if data is None
                               else HistoricalMarket(num_envs, config, self.observer.z, data, span,
                                                     self.observer.feat))
        self.ledger = Ledger(num_envs, config)
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self._drawn_by: list[np.random.Generator | None] = [None] * num_envs  # what the market drew ahead from
        self.rows = np.arange(num_envs)
        self.t = np.zeros(num_envs, np.int64)  # decisions taken this episode
        self._t0 = 0  # the common t of all envs, -1 while they are out of step

    @property
    def start(self) -> np.ndarray:
        """Historical: each env's episode start [N] in the data."""
        return self.market.start

    @property
    def open(self) -> np.ndarray:
        """Opens [N, W+L+1] of every env's episode."""
        return self.market.open

    @property
    def close(self) -> np.ndarray:
        """Closes [N, W+L+1] of every env's episode."""
        return self.market.close

    def reset_rows(self, rows: np.ndarray) -> None:
        """Start a new episode for envs ``rows`` (int array), drawing from their RNGs."""
        rows = np.asarray(rows, dtype=np.int64)
        for i in rows.tolist():
            g = self.rngs[i]
            if g is None:
                raise RuntimeError("seed the env (reset(seed=...)) before resetting it")
            if g is not self._drawn_by[i]:  # a new generator (a reseed): drop what the old one drew
                self._drawn_by[i] = g
                self.market.forget(i)
        every = len(rows) == self.n and (self.n == 1 or bool((rows[1:] > rows[:-1]).all()))
        sel = slice(None) if every else rows  # all envs: slices instead of scatters
        ref = self.market.begin(rows, sel, self.rngs)
        self.ledger.open(sel, ref)
        self.t[sel] = 0
        self._sync_t()

    def _sync_t(self) -> None:
        t0 = int(self.t[0])
        self._t0 = t0 if (self.t == t0).all() else -1

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Apply actions [N] int64; returns rewards [N] f64, terminated [N], truncated [N] bool.

        Terminated: equity <= 0 (bust); truncated: the episode's L decisions are done.
        """
        t0 = self._t0
        o, c = self.market.next_bar(t0, self.t)
        reward = self.ledger.step(actions, o, c)
        self.t += 1
        terminated = self.ledger.equity <= 0.0
        if t0 >= 0:
            self._t0 = t0 + 1
            truncated = ~terminated if t0 + 1 >= self.L else np.zeros(self.n, bool)
        else:
            truncated = self.t >= self.L
            truncated &= ~terminated
        return reward, terminated, truncated

    def observe(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Observations [len(rows), W+3+F] float32 at each env's current bar (all envs if None)."""
        return self.observer.observe(self.ledger, self.t, self._t0, rows)

    def episode_stats(self, rows: np.ndarray | slice) -> dict[str, np.ndarray]:
        """Episode summary for ``rows``: reward, return ($), trades, wins, open lots, steps."""
        stats = self.ledger.episode_stats(rows)
        stats["steps"] = self.t[rows].copy()
        return stats

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """Complete state (arrays copied, RNG states as dicts)."""
        state: dict[str, Any] = {"open": self.market.open.copy(), "close": self.market.close.copy(),
                                 "t": self.t.copy()}
        state.update(self.ledger.get_state())
        state.update(self.market.get_state())
        state["num_envs"] = self.n
        state["config"] = asdict(self.config)
        state["rngs"] = [None if g is None else g.bit_generator.state for g in self.rngs]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state()`` output; later steps reproduce the original bit for bit."""
        if state["num_envs"] != self.n or state["config"] != asdict(self.config):
            raise ValueError("state was saved from an env with a different num_envs or config")
        current = {"open": self.market.open, "close": self.market.close, "t": self.t, **self.ledger.arrays()}
        values = {}
        for name, now in current.items():
            value = np.asarray(state[name])
            if value.shape != now.shape:
                raise ValueError(f"state[{name!r}] has shape {value.shape}, expected {now.shape}")
            values[name] = value.astype(now.dtype, copy=True)
        self.market.set_state(state, values.pop("open"), values.pop("close"))
        self.t = values.pop("t")
        self.ledger.set_state(values)
        self._sync_t()
        for i, st in enumerate(state["rngs"]):
            if st is None:
                self.rngs[i] = None
                continue
            if self.rngs[i] is None:
                self.rngs[i] = np.random.Generator(getattr(np.random, st["bit_generator"])())
            self.rngs[i].bit_generator.state = st
        self._drawn_by = list(self.rngs)
