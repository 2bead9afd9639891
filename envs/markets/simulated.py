"""Simulated market source: a fresh seeded price path per episode.

Paths come from ``envs.markets.processes``, fed with variates drawn ahead
from per-env pools (``envs.markets.variates``): per episode 8 parameter uniforms (+ W+L+1
for regime/jump paths) and W+L+1 shock normals (+ W+L+1 for jump paths). Prices
are kept time-major (``[bars, N]``: one bar of every env is contiguous), so while
every env is at the same step a step reads plain rows, never gathers.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from envs.accumulate import accumulate_time
from envs.config import EnvConfig
from envs.markets.base import Market, Rows
from envs.ema_deviation import ema_deviations
from envs.observation import RMS_FLOOR, normalise_paths
from envs.markets.processes import (JUMP, REGIME, log_first_open, process_groups, process_index, process_log_returns,
                            regime_drift)
from envs.markets.variates import VariatePool

_POOL_EPISODES = 8  # episodes of variates per pool refill


class SimulatedMarket(Market):
    """N envs on simulated paths of ``config.market``; prices ``[W+L+1, N]`` time-major."""

    def __init__(self, num_envs: int, config: EnvConfig, z: np.ndarray, feat: np.ndarray | None = None) -> None:
        """``feat`` [N, L+1, E]: the observer's array the ``--ema-spans`` deviations go to (needed with spans)."""
        super().__init__(num_envs, config, z)
        self._spans = config.spans
        if self._spans and feat is None:
            raise ValueError("--ema-spans needs the observer's feat array")
        self._feat = feat
        n, B = num_envs, self.bars
        self._open_t = np.zeros((B, n))
        self._close_t = np.ones((B, n))
        self._rows = np.arange(n)
        self._scratch = [np.empty(B * n) for _ in range(3)]  # time-major [B, m] work arrays (flat)
        self._z32 = np.empty((B - 1) * n, np.float32)  # time-major normalised returns before the transpose
        self._paths = np.empty((n, B))  # env-major log returns before the transpose
        self._uniform = VariatePool(n, _POOL_EPISODES * (B + 8), normal=False)
        self._normal = VariatePool(n, _POOL_EPISODES * B, normal=True)
        # Opt-in (``record_drift``): the hidden drift [N, W+L+1] of each env's current regime
        # path (0 on other processes). Off in training; baselines that know the state read it.
        self.drift: np.ndarray | None = None

    def record_drift(self) -> None:
        """From the next episode on, keep each regime path's hidden drift in ``self.drift``."""
        self.drift = np.zeros((self.n, self.bars))

    @property
    def open(self) -> np.ndarray:
        """Opens [N, W+L+1] (a view)."""
        return self._open_t.T

    @property
    def close(self) -> np.ndarray:
        """Closes [N, W+L+1] (a view)."""
        return self._close_t.T

    def forget(self, i: int) -> None:
        self._uniform.clear(i)
        self._normal.clear(i)

    def begin(self, rows: np.ndarray, sel: Rows, rngs: list) -> np.ndarray:
        every = isinstance(sel, slice)
        m = len(rows)
        log_open0, r = self._draw_paths(rows, rngs)
        ret = self._work(0, m)  # log returns, time-major [B, m]
        ret[...] = r.T
        close = self._close_t if every else self._work(1, m)
        np.add(ret[0], log_open0, out=close[0])
        accumulate_time(np.add, close, ret)  # log closes
        np.exp(close, out=close)
        if not every:
            self._close_t[:, rows] = close
        self._open_t[0, sel] = np.exp(log_open0)
        self._open_t[1:, sel] = close[:-1]  # bars open at the previous close
        self._normalise(sel, ret[1:])
        if self._spans:
            self._ema_features(sel)
        return self._close_t[self.W, sel]

    def _draw_paths(self, rows: np.ndarray, rngs: list) -> tuple[np.ndarray, np.ndarray]:
        """Log first open [m] and log returns [m, W+L+1] of ``rows``, from their pools."""
        market, B = self.config.market, self.bars
        u = self._uniform.take(rows, 8, rngs)
        proc = process_index(market, u)
        r = self._paths[: len(rows)]
        for process, at in process_groups(market, proc):  # each group's variates straight from the pools
            sub = rows[at]
            z = self._normal.take(sub, B, rngs)
            ext = self._uniform.take(sub, B, rngs) if process in (REGIME, JUMP) else None
            jump_z = self._normal.take(sub, B, rngs) if process == JUMP else None
            r[at] = process_log_returns(market, process, u[at], z, ext, jump_z)
            if self.drift is not None:
                self.drift[sub] = regime_drift(market, u[at], ext) if process == REGIME else 0.0
        return log_first_open(u), r

    def _ema_features(self, sel: Rows) -> None:
        """``feat[sel]`` [m, L+1, E]: the EMA deviations of each episode's decision bars W..W+L, from its
        stored first open and closes alone (so a restored state recomputes the same bits)."""
        W = self.W
        close = self._close_t[:, sel]  # [W+L+1, m]
        logc = np.log(close)
        r = logc[1:] - logc[:-1]  # bars 1..W+L
        csum = np.zeros((r.shape[0] + 1, r.shape[1]))
        np.cumsum(r * r, axis=0, out=csum[1:])
        rms = np.zeros(close.shape)
        rms[W:] = np.sqrt(np.maximum((csum[W:] - csum[:-W]) / W, RMS_FLOOR * RMS_FLOOR))  # bar b: returns b-W+1..b
        z = ema_deviations(self._open_t[0, sel], close, rms, W, self._spans)  # [W+L+1, m, E]
        self._feat[sel] = z[W:].transpose(1, 0, 2)

    def _work(self, k: int, m: int, rows: int | None = None) -> np.ndarray:
        """Scratch array k as a contiguous time-major [rows (default W+L+1), m] array."""
        rows = self.bars if rows is None else rows
        return self._scratch[k][: rows * m].reshape(rows, m)

    def _normalise(self, sel: Rows, r: np.ndarray) -> None:
        """``z[sel]`` from time-major log returns r [W+L, m] (held in scratch 0 or 1)."""
        m = r.shape[1]
        csum = self._work(2, m)
        ms = self._work(0 if np.may_share_memory(r, self._scratch[1]) else 1, m, self.bars - 1)
        zt = self._z32[: (self.bars - 1) * m].reshape(self.bars - 1, m)
        self.z[sel] = normalise_paths(r, self.W, csum, ms, zt).T

    def next_bar(self, t0: int, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if t0 >= 0:  # every env at the same step: one contiguous row of each price array
            bar = t0 + self.W + 1
            return self._open_t[bar], self._close_t[bar]
        bar = t + (self.W + 1)
        return self._open_t[bar, self._rows], self._close_t[bar, self._rows]

    def get_state(self) -> dict[str, Any]:
        """``z``: episodes keep the normalised returns of the simulator's exact log returns."""
        return {"z": self.z.copy(), "pools": {"uniform": self._uniform.get_state(), "normal": self._normal.get_state()}}

    def set_state(self, state: dict[str, Any], open_: np.ndarray, close: np.ndarray) -> None:
        if "start" in state:
            raise ValueError("state was saved from an env on historical data; this env simulates its markets")
        self._open_t[...] = open_.T
        self._close_t[...] = close.T
        if "z" in state:
            self.z[...] = np.asarray(state["z"], dtype=np.float32)
        else:  # states saved before "z": from the closes (equal to float32 rounding)
            m = self.n
            logc = np.log(self._close_t, out=self._work(0, m))
            self._normalise(slice(None), np.subtract(logc[1:], logc[:-1], out=self._work(1, m, self.bars - 1)))
        if self._spans:
            self._ema_features(slice(None))
        pools = state.get("pools") or {}  # none in states saved before the pools existed
        self._uniform.set_state(pools.get("uniform"))
        self._normal.set_state(pools.get("normal"))
