"""Trading accounts: one batched core (N envs) and the single gymnasium env on top.

``TradingCore`` holds every env's state as ``[N, ...]`` arrays and steps them all
in one NumPy pass; ``TradingEnv`` is a thin N=1 view of it and
``envs.vector.VectorTradingEnv`` the N-env view, so the accounting has one
source of truth and the two agree bit for bit.

Episode layout (per env, ``W = window``, ``L = episode_length``): bars
``0..W+L`` (``W+L+1`` bars). Decision ``j`` (0-based) is taken after bar
``t = W+j`` closes, is filled at bar ``t+1``'s open with slippage and marked at
bar ``t+1``'s close. Observation at bar ``t`` ([W+3] float32):

* ``[0:W]``  log returns of close for bars ``t-W+1..t``, each divided by the RMS
  of the ``W`` returns ending at that bar (for the episode's first ``W`` bars:
  of the first full window, bars ``1..W``), clipped to +-5 -- scale free and
  causal (nothing after bar ``t``, since ``t >= W``);
* ``[W]``    position / K (in -1..1);
* ``[W+1]``  unrealised PnL of the open lots / initial cash * 10, clipped to +-10;
* ``[W+2]``  bars held in the current position / episode_length (0..1).
"""
from __future__ import annotations

from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Sequence

import gymnasium as gym
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs.config import EnvConfig
from envs.simulated import simulate

if TYPE_CHECKING:
    from envs.data import MarketData

RETURN_CLIP = 5.0
UPNL_SCALE = 10.0
UPNL_CLIP = 10.0
_TINY = 1e-12

_STATE_ARRAYS = (
    "open", "close", "t", "units", "cash", "equity", "pos", "head",
    "entry", "entry_fee", "cost", "held", "mark", "ep_reward", "closed", "wins",
)


def make_config(config: EnvConfig | None, overrides: dict[str, Any]) -> EnvConfig:
    """``config`` (default EnvConfig()) with ``overrides`` applied, validated."""
    config = replace(config if config is not None else EnvConfig(), **overrides)
    config.validate()
    return config


def observation_space(config: EnvConfig) -> gym.spaces.Box:
    """Box [W+3] float32 with the bounds of the layout above."""
    w = config.window
    low = np.concatenate([np.full(w, -RETURN_CLIP), [-1.0, -UPNL_CLIP, 0.0]]).astype(np.float32)
    high = np.concatenate([np.full(w, RETURN_CLIP), [1.0, UPNL_CLIP, 1.0]]).astype(np.float32)
    return gym.spaces.Box(low, high, dtype=np.float32)


def _rowsum(a: np.ndarray) -> np.ndarray:
    """Sum of a [N, K] over K in a fixed order (bitwise independent of N)."""
    out = a[:, 0].copy()
    for k in range(1, a.shape[1]):
        out += a[:, k]
    return out


class TradingCore:
    """N trading accounts stepped together. All state arrays are [N, ...]."""

    def __init__(self, num_envs: int, config: EnvConfig, data: MarketData | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.n = num_envs
        self.config = config
        c = config
        self.W, self.L, self.K = c.window, c.episode_length, c.max_position
        self.bars = self.W + self.L + 1
        self.offset = 0 if c.no_short else self.K
        self.fee = c.fee_bps / 1e4
        self.slip = c.slippage_bps / 1e4
        self.reward_per_dollar = c.reward_scale / c.initial_cash
        self.data_open: np.ndarray | None = None
        self.data_close: np.ndarray | None = None
        if data is not None:
            self.data_open = np.ascontiguousarray(data.open, dtype=np.float64)
            self.data_close = np.ascontiguousarray(data.close, dtype=np.float64)
            have = len(self.data_close)
            if have < self.bars:
                raise ValueError(
                    f"data has {have} bars but one episode needs window + episode_length + 1 = {self.bars}; "
                    f"use a longer file or lower --window/--episode-length"
                )
            if not (np.all(self.data_open > 0) and np.all(self.data_close > 0)):
                raise ValueError("data open/close prices must all be > 0 (and not NaN)")
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self.rows = np.arange(num_envs)
        self._slot = np.arange(self.K)
        n, B, W, L, K = num_envs, self.bars, self.W, self.L, self.K
        self.open = np.zeros((n, B))
        self.close = np.ones((n, B))
        self.z = np.zeros((n, B - 1), np.float32)  # [N, W+L] normalised returns, z[:, b-1] = bar b
        self.z_win = sliding_window_view(self.z, W, axis=1)  # [N, L+1, W] view: obs windows
        self.t = np.zeros(n, np.int64)  # decisions taken this episode
        self.units = np.zeros(n)  # units per lot
        self.cash = np.zeros(n)
        self.equity = np.zeros(n)
        self.pos = np.zeros(n, np.int64)  # signed lots
        self.head = np.zeros(n, np.int64)  # FIFO ring-buffer head
        self.entry = np.zeros((n, K))  # entry fill price per lot slot
        self.entry_fee = np.zeros((n, K))
        self.cost = np.zeros(n)  # sum of the open lots' entry fills
        self.held = np.zeros(n, np.int64)  # steps in the current position
        self.mark = np.ones(n)  # close of the current bar
        self.ep_reward = np.zeros(n)
        self._scratch_close = np.empty((n, B))
        self._scratch_ret = np.empty((n, B - 1))
        self._scratch_ret2 = np.empty((n, B - 1))
        self.closed = np.zeros(n, np.int64)
        self.wins = np.zeros(n, np.int64)

    # ------------------------------------------------------------------ reset
    def reset_rows(self, rows: np.ndarray) -> None:
        """Start a new episode for envs ``rows`` (int array), drawing from their RNGs."""
        rngs = [self.rngs[i] for i in rows]
        if any(g is None for g in rngs):
            raise RuntimeError("seed the env (reset(seed=...)) before resetting it")
        if self.data_close is None:
            path = simulate(self.config.market, rngs, self.bars, ohlcv=False)
            o, c = path["open"], path["close"]
        else:
            top = len(self.data_close) - self.bars + 1
            start = np.array([g.integers(0, top) for g in rngs], dtype=np.int64)
            idx = start[:, None] + np.arange(self.bars)
            o, c = self.data_open[idx], self.data_close[idx]
        self.open[rows] = o
        self.close[rows] = c
        self._prepare_returns(rows, c)
        cfg = self.config
        ref = c[:, self.W]
        self.units[rows] = cfg.initial_cash / (self.K * ref)
        self.mark[rows] = ref
        for name in ("t", "pos", "head", "held", "closed", "wins"):
            getattr(self, name)[rows] = 0
        for name in ("entry", "entry_fee", "cost", "ep_reward"):
            getattr(self, name)[rows] = 0.0
        self.cash[rows] = cfg.initial_cash
        self.equity[rows] = cfg.initial_cash

    def _prepare_returns(self, rows: np.ndarray, close: np.ndarray) -> None:
        """Normalised log returns z [n, W+L] (float32) of ``rows`` from close [n, W+L+1].

        In-place on preallocated scratch: fresh multi-MB temporaries cost page faults.
        """
        W, m = self.W, len(rows)
        logc, ms = self._scratch_close[:m], self._scratch_ret[:m]
        np.log(close, out=logc)
        r = np.subtract(logc[:, 1:], logc[:, :-1], out=self._scratch_ret2[:m])  # [m, W+L]
        np.multiply(r, r, out=ms)
        np.cumsum(ms, axis=1, out=logc[:, 1:])  # logc is free again: running sum of r^2
        logc[:, 0] = 0.0
        np.subtract(logc[:, W:], logc[:, :-W], out=ms[:, W - 1 :])  # sum of the W squares ending at each bar
        ms[:, : W - 1] = ms[:, W - 1 : W]  # the first W bars share the first full window
        np.multiply(ms, 1.0 / W, out=ms)
        np.maximum(ms, _TINY * _TINY, out=ms)
        np.sqrt(ms, out=ms)  # RMS, >= _TINY
        np.divide(r, ms, out=r)
        np.minimum(r, RETURN_CLIP, out=r)
        np.maximum(r, -RETURN_CLIP, out=r)
        self.z[rows] = r

    # ------------------------------------------------------------------- step
    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Apply actions [N] int64; returns rewards [N] f64, terminated [N], truncated [N] bool.

        Target position ``actions - K`` (``actions`` with no_short) lots, filled at
        the next bar's open with slippage; lots close FIFO, each closed lot is one
        trade; equity is marked at that bar's close.
        """
        K = self.K
        t0 = int(self.t[0])
        if (self.t == t0).all():  # the usual case: a column slice instead of a gather
            o, c = self.open[:, t0 + self.W + 1].copy(), self.close[:, t0 + self.W + 1].copy()  # not views
        else:
            bar = self.t + (self.W + 1)
            o, c = self.open[self.rows, bar], self.close[self.rows, bar]
        target = actions - self.offset  # a new array: never aliases the caller's
        pos = self.pos
        trade = target - pos  # signed lots bought (+) or sold (-), all at one fill
        same = target * pos > 0
        keep = np.where(same, np.minimum(np.abs(pos), np.abs(target)), 0)  # lots carried over
        fill = o * np.where(trade > 0, 1.0 + self.slip, 1.0 - self.slip)
        fill_units = fill * self.units  # notional of one lot
        lot_fee = self.fee * fill_units
        self.cash -= trade * fill_units + np.abs(trade) * lot_fee
        n_close = np.abs(pos) - keep
        if n_close.any():
            closing = n_close[:, None] > 0 if K == 1 else (self._slot - self.head[:, None]) % K < n_close[:, None]
            side = np.sign(pos)[:, None]
            pnl = side * (fill[:, None] - self.entry) * self.units[:, None] - self.entry_fee - lot_fee[:, None]
            self.closed += n_close
            self.wins += np.count_nonzero(closing & (pnl > 0.0), axis=1)
            self.cost = np.where(keep == 0, 0.0, self.cost - _rowsum(np.where(closing, self.entry, 0.0)))
            if K > 1:
                self.head = (self.head + n_close) % K
        n_open = np.abs(target) - keep
        if n_open.any():
            if K == 1:
                opening = n_open[:, None] > 0
            else:
                off = (self._slot - self.head[:, None]) % K
                opening = (off >= keep[:, None]) & (off < (keep + n_open)[:, None])  # [N, K]
            self.entry = np.where(opening, fill[:, None], self.entry)
            self.entry_fee = np.where(opening, lot_fee[:, None], self.entry_fee)
            self.cost += n_open * fill
        self.held = np.where(same, self.held + 1, target != 0)
        self.pos = target
        self.mark = c
        equity = self.cash + target * self.units * c
        reward = (equity - self.equity) * self.reward_per_dollar
        self.equity = equity
        self.ep_reward += reward
        self.t += 1
        terminated = equity <= 0.0
        truncated = (self.t >= self.L) & ~terminated
        return reward, terminated, truncated

    # ---------------------------------------------------------------- observe
    def observe(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Observations [len(rows), W+3] float32 at each env's current bar (all envs if None)."""
        W = self.W
        if rows is None:  # all envs: plain arrays, and a slice when every env is at the same step
            pos, units, mark, cost, held, t = self.pos, self.units, self.mark, self.cost, self.held, self.t
            t0 = int(t[0])
            window = self.z[:, t0 : t0 + W] if (t == t0).all() else self.z_win[self.rows, t]
        else:
            pos, units, mark, cost, held = (a[rows] for a in (self.pos, self.units, self.mark, self.cost, self.held))
            window = self.z_win[rows, self.t[rows]]
        obs = np.empty((len(pos), W + 3), np.float32)
        obs[:, :W] = window
        obs[:, W] = pos * (1.0 / self.K)
        upnl = np.sign(pos) * units * (np.abs(pos) * mark - cost)
        upnl *= UPNL_SCALE / self.config.initial_cash
        np.minimum(upnl, UPNL_CLIP, out=upnl)
        np.maximum(upnl, -UPNL_CLIP, out=upnl)
        obs[:, W + 1] = upnl
        obs[:, W + 2] = held * (1.0 / self.L)
        return obs

    def episode_stats(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Episode summary for ``rows``: reward, return ($), trades, wins, open lots, steps."""
        return {
            "reward": self.ep_reward[rows].copy(),
            "return": self.equity[rows] - self.config.initial_cash,
            "closed_trades": self.closed[rows].copy(),
            "winning_trades": self.wins[rows].copy(),
            "open_lots": np.abs(self.pos[rows]),
            "steps": self.t[rows].copy(),
        }

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """Complete state (arrays copied, RNG states as dicts)."""
        state: dict[str, Any] = {name: getattr(self, name).copy() for name in _STATE_ARRAYS}
        state["num_envs"] = self.n
        state["config"] = asdict(self.config)
        state["rngs"] = [None if g is None else g.bit_generator.state for g in self.rngs]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state()`` output; later steps reproduce the original bit for bit."""
        if state["num_envs"] != self.n or state["config"] != asdict(self.config):
            raise ValueError("state was saved from an env with a different num_envs or config")
        for name in _STATE_ARRAYS:
            value = np.asarray(state[name])
            current = getattr(self, name)
            if value.shape != current.shape:
                raise ValueError(f"state[{name!r}] has shape {value.shape}, expected {current.shape}")
            setattr(self, name, value.astype(current.dtype, copy=True))
        self._prepare_returns(self.rows, self.close)  # z is derived from close
        for i, st in enumerate(state["rngs"]):
            if st is None:
                self.rngs[i] = None
                continue
            if self.rngs[i] is None:
                self.rngs[i] = np.random.Generator(getattr(np.random, st["bit_generator"])())
            self.rngs[i].bit_generator.state = st


class TradingEnv(gym.Env):
    """Single trading env: Discrete(num_actions) target position, Box[W+3] obs.

    ``TradingEnv(config=None, data=None, **overrides)``; overrides are EnvConfig
    fields (``market="regime"``). With ``data`` each episode is a random
    ``W+L+1``-bar window of it, otherwise a fresh simulated path.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: EnvConfig | None = None, data: MarketData | None = None, **overrides: Any) -> None:
        self.config = make_config(config, overrides)
        self.core = TradingCore(1, self.config, data)
        self.observation_space = observation_space(self.config)
        self.action_space = gym.spaces.Discrete(self.config.num_actions)
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.core.rngs[0] = self.np_random  # the same object: draws advance it
        self.core.reset_rows(self.core.rows)
        self._done = False
        return self.core.observe()[0], {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("episode is over (or never started): call reset() before step()")
        a = int(action)
        if not 0 <= a < self.config.num_actions:
            raise ValueError(f"action {action!r} outside 0..{self.config.num_actions - 1}")
        reward, terminated, truncated = self.core.step(np.array([a], np.int64))
        obs = self.core.observe()[0]
        info: dict[str, Any] = {}
        if terminated[0] or truncated[0]:
            self._done = True
            stats = self.core.episode_stats(self.core.rows)
            info["episode"] = {k: v[0].item() for k, v in stats.items()}
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def get_state(self) -> dict[str, Any]:
        """Complete env state (incl. the RNG) as plain containers + numpy arrays."""
        state = self.core.get_state()
        state["done"] = self._done
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state()``; stepping afterwards reproduces the original exactly."""
        self.core.set_state(state)
        if self.core.rngs[0] is not None:
            self._np_random = self.core.rngs[0]
        self._done = bool(state["done"])
