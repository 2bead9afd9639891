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
  causal (nothing after bar ``t``, since ``t >= W``). On historical data
  (``data=``) the bars are the file's: the normalised returns of the whole file
  are computed once, so the RMS window of an episode's first bars runs over the
  file's preceding bars (only the file's first ``W`` bars share its first full
  window); an episode is then just a start offset into the shared arrays;
* ``[W]``    position / K (in -1..1);
* ``[W+1]``  unrealised PnL of the open lots / initial cash * 10, clipped to +-10;
* ``[W+2]``  bars held in the current position / episode_length (0..1).
"""
from __future__ import annotations

import zlib
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs.accumulate import accumulate_time
from envs.config import EnvConfig
from envs.simulated import JUMP, REGIME, log_first_open, process_groups, process_index, process_log_returns
from envs.variates import VariatePool

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
_INT_STATE = frozenset({"t", "pos", "head", "held", "closed", "wins"})  # float64 inside, int64 in the state
_POOL_EPISODES = 8  # episodes of variates per pool refill
_START_EPISODES = 64  # historical: episode starts per pool refill


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


def normalised_returns(close: np.ndarray, window: int) -> np.ndarray:
    """Normalised log returns (float32) of a whole close series: ``z[b-1]`` is bar ``b``.

    Bar ``b >= W`` is ``r[b] / RMS(r[b-W+1..b])``; bars ``1..W-1`` use the RMS of the
    first full window (bars ``1..W``); clipped to +-5. Causal at every bar ``t >= W``.
    """
    W = window
    r = np.diff(np.log(np.asarray(close, dtype=np.float64)))
    ms = np.empty_like(r)
    ms[W - 1 :] = sliding_window_view(r * r, W).sum(axis=1)  # no running-sum cancellation
    ms[: W - 1] = ms[W - 1]
    np.multiply(ms, 1.0 / W, out=ms)
    np.maximum(ms, _TINY * _TINY, out=ms)
    np.sqrt(ms, out=ms)
    z = np.empty(len(r), np.float32)
    np.divide(r, ms, out=z, casting="same_kind")
    np.minimum(z, RETURN_CLIP, out=z)
    np.maximum(z, -RETURN_CLIP, out=z)
    return z


def _rowsum(a: np.ndarray) -> np.ndarray:
    """Sum of a [N, K] over K in a fixed order (bitwise independent of N)."""
    out = a[:, 0].copy()
    for k in range(1, a.shape[1]):
        out += a[:, k]
    return out


class TradingCore:
    """N trading accounts stepped together. All state arrays are [N, ...].

    Prices live time-major (``[bars, N]``: one bar of every env is contiguous);
    ``open``/``close`` are their [N, bars] views. Positions and counters are
    float64 internally (no int/float casts per step) and int64 in the state and
    the episode stats. While every env is at the same step (the usual case: envs
    only fall out of step when one goes bust) a step reads plain rows, never
    gathers. Simulated paths come from per-env pools of pre-drawn variates
    (``VariatePool``), so a reset costs no per-env generator calls.

    On historical data nothing is copied per episode: the file's normalised
    returns are computed once (``normalised_returns``) and an env's episode is its
    start offset ``start`` into the shared arrays: a reset copies each env's
    precomputed normalised returns into ``z`` (one raw item per env), a step
    gathers the N fills and marks (``open``/``close`` are then gathered copies).
    """

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
            self._top = have - self.bars + 1  # start offsets 0.._top-1
            self._fingerprint = {"bars": have, "close_crc32": zlib.crc32(self.data_close.tobytes())}
            self._zdata = normalised_returns(self.data_close, self.W)  # [bars-1], _zdata[b-1] = bar b
            # row s: the normalised returns of an episode starting at bar s, as one raw item
            self._ep_item = np.dtype(f"V{4 * (self.bars - 1)}")
            self._zepisodes = sliding_window_view(self._zdata, self.bars - 1).view(self._ep_item)[:, 0]
        self.start = np.zeros(num_envs, np.int64)  # historical: each env's episode start in the data
        self.rngs: list[np.random.Generator | None] = [None] * num_envs
        self.rows = np.arange(num_envs)
        self._slot = np.arange(self.K)
        n, B, W, K = num_envs, self.bars, self.W, self.K
        hist = data is not None
        self._open_t = np.zeros((0 if hist else B, n))  # time-major prices (simulated only)
        self._close_t = np.ones((0 if hist else B, n))
        self.z = np.zeros((n, B - 1), np.float32)  # [N, W+L] normalised returns, z[:, b-1] = bar b
        self.z_win = sliding_window_view(self.z, W, axis=1)  # [N, L+1, W] view: obs windows
        self._bar = np.zeros(n, np.int64)  # historical: data index scratch
        self._o, self._c = np.zeros(n), np.ones(n)  # historical: this step's opens and closes
        self.t = np.zeros(n, np.int64)  # decisions taken this episode
        self._t0 = 0  # the common t of all envs, -1 while they are out of step
        self.units = np.zeros(n)  # units per lot
        self.cash = np.zeros(n)
        self.equity = np.zeros(n)
        self.pos = np.zeros(n)  # signed lots
        self.head = np.zeros(n, np.int64)  # FIFO ring-buffer head
        self.entry = np.zeros((n, K))  # entry fill price per lot slot
        self.entry_fee = np.zeros((n, K))
        self.cost = np.zeros(n)  # sum of the open lots' entry fills
        self.held = np.zeros(n)  # steps in the current position
        self.mark = np.ones(n)  # close of the current bar
        self.ep_reward = np.zeros(n)
        self._counts = np.zeros((2, n))  # rows: closed trades, winning trades
        self._flags = np.zeros((2, n), bool)
        self._traded = np.zeros(n, bool)
        self._targets = np.arange(c.num_actions, dtype=np.float64) - self.offset  # action -> target lots
        self._scratch = [np.empty(0 if hist else B * n) for _ in range(3)]  # time-major [B, m] work arrays (flat)
        self._z32 = np.empty(0 if hist else (B - 1) * n, np.float32)  # time-major normalised returns before the transpose
        self._tmp = [np.empty(n) for _ in range(4)]
        self._win_item = np.dtype(f"V{4 * W}")  # one observation window as a raw item
        self._feat = np.empty((3, n))  # observation columns W.. before the float32 cast
        self._paths = np.empty((n, 0 if hist else B))  # env-major simulated log returns before the transpose
        # Pools: per episode 8 parameter uniforms (+ B for regime/jump paths) and B shock
        # normals (+ B for jump paths); refilled about every _POOL_EPISODES episodes.
        self._pool_owner: list[np.random.Generator | None] = [None] * n
        # (historical: one uniform per episode, the start offset, refilled every _START_EPISODES)
        self._upool = VariatePool(n, _POOL_EPISODES * (B + 8) if data is None else _START_EPISODES, normal=False)
        self._zpool = VariatePool(n, _POOL_EPISODES * B, normal=True) if data is None else None

    @property
    def closed(self) -> np.ndarray:
        """Closed trades [N] this episode (float64, a view)."""
        return self._counts[0]

    @closed.setter
    def closed(self, value: np.ndarray) -> None:
        self._counts[0] = value

    @property
    def wins(self) -> np.ndarray:
        """Winning closed trades [N] this episode (float64, a view)."""
        return self._counts[1]

    @wins.setter
    def wins(self, value: np.ndarray) -> None:
        self._counts[1] = value

    @property
    def historical(self) -> bool:
        return self.data_close is not None

    def _episode_bars(self, prices: np.ndarray) -> np.ndarray:
        """[N, W+L+1] of each env's episode from a data price array (a gathered copy)."""
        return prices[self.start[:, None] + np.arange(self.bars)]

    @property
    def open(self) -> np.ndarray:
        """Opens [N, W+L+1] of every env's episode (a view; a copy on historical data)."""
        return self._episode_bars(self.data_open) if self.historical else self._open_t.T

    @property
    def close(self) -> np.ndarray:
        """Closes [N, W+L+1] of every env's episode (a view; a copy on historical data)."""
        return self._episode_bars(self.data_close) if self.historical else self._close_t.T

    # ------------------------------------------------------------------ reset
    def reset_rows(self, rows: np.ndarray) -> None:
        """Start a new episode for envs ``rows`` (int array), drawing from their RNGs."""
        rows = np.asarray(rows, dtype=np.int64)
        rngs = self.rngs
        for i in rows.tolist():
            g = rngs[i]
            if g is None:
                raise RuntimeError("seed the env (reset(seed=...)) before resetting it")
            if g is not self._pool_owner[i]:  # a new generator (a reseed): drop what the old one drew
                self._pool_owner[i] = g
                self._upool.clear(i)
                if self._zpool is not None:
                    self._zpool.clear(i)
        every = len(rows) == self.n and (self.n == 1 or bool((rows[1:] > rows[:-1]).all()))
        sel = slice(None) if every else rows  # all envs: slices instead of scatters
        m = len(rows)
        if self.historical:  # an episode is its start offset: nothing to copy or normalise
            start = np.multiply(self._upool.take(rows, 1, rngs)[:, 0], self._top).astype(np.int64)
            np.minimum(start, self._top - 1, out=start)  # u * top may round up to top
            self.start[sel] = start
            self._gather_returns(sel, start)
            self._init_accounts(sel, self.data_close[start + self.W])
            return
        log_first_open, r = self._draw_paths(rows)
        ret = self._work(0, m)  # log returns, time-major [B, m]
        ret[...] = r.T
        close = self._close_t if every else self._work(1, m)
        np.add(ret[0], log_first_open, out=close[0])
        accumulate_time(np.add, close, ret)  # log closes
        np.exp(close, out=close)
        if not every:
            self._close_t[:, rows] = close
        self._open_t[0, sel] = np.exp(log_first_open)
        self._open_t[1:, sel] = close[:-1]  # bars open at the previous close
        ret = ret[1:]
        self._prepare_returns(sel, ret)
        self._init_accounts(sel, self._close_t[self.W, sel])

    def _gather_returns(self, sel: np.ndarray | slice, start: np.ndarray) -> None:
        """Historical: z of envs ``sel`` from the file's precomputed normalised returns.

        One raw ``4(W+L)``-byte item per env (a memcpy each), so observations then read
        contiguous rows as on simulated paths: cheaper than gathering N windows per step.
        """
        self.z.view(self._ep_item)[:, 0][sel] = self._zepisodes[start]

    def _init_accounts(self, sel: np.ndarray | slice, ref: np.ndarray) -> None:
        """Fresh accounts for envs ``sel``; ``ref``: their reference close of bar W."""
        cfg = self.config
        self.units[sel] = cfg.initial_cash / (self.K * ref)
        self.mark[sel] = ref
        for name in ("t", "head"):
            getattr(self, name)[sel] = 0
        for name in ("pos", "held", "closed", "wins", "entry", "entry_fee", "cost", "ep_reward"):
            getattr(self, name)[sel] = 0.0
        self.cash[sel] = cfg.initial_cash
        self.equity[sel] = cfg.initial_cash
        self._sync_t()

    def _sync_t(self) -> None:
        t0 = int(self.t[0])
        self._t0 = t0 if (self.t == t0).all() else -1

    def _draw_paths(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Simulated log first open [m] and log returns [m, W+L+1] of ``rows``, from their pools."""
        market, B, rngs = self.config.market, self.bars, self.rngs
        u = self._upool.take(rows, 8, rngs)
        proc = process_index(market, u)
        r = self._paths[: len(rows)] if len(rows) <= self.n else np.empty((len(rows), B))
        for process, at in process_groups(market, proc):  # each group's variates taken straight from the pools
            sub = rows[at]
            z = self._zpool.take(sub, B, rngs)
            ext = self._upool.take(sub, B, rngs) if process in (REGIME, JUMP) else None
            jump_z = self._zpool.take(sub, B, rngs) if process == JUMP else None
            r[at] = process_log_returns(market, process, u[at], z, ext, jump_z)
        return log_first_open(u), r

    def _work(self, k: int, m: int, rows: int | None = None) -> np.ndarray:
        """Scratch array k as a contiguous time-major [rows (default W+L+1), m] array."""
        rows = self.bars if rows is None else rows
        return self._scratch[k][: rows * m].reshape(rows, m)

    def _log_returns(self, close_t: np.ndarray) -> np.ndarray:
        """Log returns [W+L, m] of bars 1.. from time-major closes [W+L+1, m]."""
        logc = np.log(close_t, out=self._work(0, close_t.shape[1]))
        return np.subtract(logc[1:], logc[:-1], out=self._work(1, close_t.shape[1], self.bars - 1))

    def _prepare_returns(self, rows: np.ndarray | slice, r: np.ndarray) -> None:
        """Normalised log returns z (float32) of ``rows`` from their time-major log returns r [W+L, m].

        In-place on preallocated scratch: fresh multi-MB temporaries cost page faults.
        """
        W, m = self.W, r.shape[1]
        csum = self._work(2, m)  # csum[k] = sum of the first k squares
        csum[0] = 0.0
        np.multiply(r, r, out=csum[1:])
        accumulate_time(np.add, csum[1:])
        ms = self._work(0 if np.may_share_memory(r, self._scratch[1]) else 1, m, self.bars - 1)
        np.subtract(csum[W:], csum[:-W], out=ms[W - 1 :])  # sum of the W squares ending at each bar
        ms[: W - 1] = ms[W - 1]  # the first W bars share the first full window
        np.multiply(ms, 1.0 / W, out=ms)
        np.maximum(ms, _TINY * _TINY, out=ms)
        np.sqrt(ms, out=ms)  # RMS, >= _TINY
        # float32 from here (clipping to +-5 commutes with the rounding: 5 is exact)
        zt = self._z32[: (self.bars - 1) * m].reshape(self.bars - 1, m)
        np.divide(r, ms, out=zt, casting="same_kind")
        np.minimum(zt, RETURN_CLIP, out=zt)
        np.maximum(zt, -RETURN_CLIP, out=zt)
        self.z[rows] = zt.T

    # ------------------------------------------------------------------- step
    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Apply actions [N] int64; returns rewards [N] f64, terminated [N], truncated [N] bool.

        Target position ``actions - K`` (``actions`` with no_short) lots, filled at
        the next bar's open with slippage; lots close FIFO, each closed lot is one
        trade; equity is marked at that bar's close.
        """
        t0 = self._t0
        if self.historical:  # gather bar t+1 of every env from the shared data
            bar = self._bar
            if t0 >= 0:
                np.add(self.start, t0 + self.W + 1, out=bar)
            else:
                np.add(self.start, self.t, out=bar)
                bar += self.W + 1
            o, c = self._o, self._c
            self.data_open.take(bar, out=o, mode="clip")  # bars are always in range; "clip" skips a buffer
            self.data_close.take(bar, out=c, mode="clip")
        elif t0 >= 0:  # every env at the same step: one contiguous row of each price array
            bar = t0 + self.W + 1
            o, c = self._open_t[bar], self._close_t[bar]
        else:
            bar = self.t + (self.W + 1)
            o, c = self._open_t[bar, self.rows], self._close_t[bar, self.rows]
        target = self._targets.take(actions)  # float lots, a new array
        if self.K == 1:
            self._trade_one_lot(target, o)
        else:
            self._trade_lots(target, o)
        self.pos = target
        np.copyto(self.mark, c)
        equity = np.multiply(target, c)
        equity *= self.units
        equity += self.cash
        reward = np.subtract(equity, self.equity)
        reward *= self.reward_per_dollar
        self.equity = equity
        self.ep_reward += reward
        self.t += 1
        terminated = equity <= 0.0
        if t0 >= 0:
            self._t0 = t0 + 1
            truncated = ~terminated if t0 + 1 >= self.L else np.zeros(self.n, bool)
        else:
            truncated = self.t >= self.L
            truncated &= ~terminated
        return reward, terminated, truncated

    def _fill(self, trade: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fill price [N] (the open with adverse slippage) and the fee of one lot; pays for the trade."""
        fill = np.sign(trade)
        fill *= self.slip
        fill += 1.0  # 1 + slip buying, 1 - slip selling (1 with no trade: unused)
        fill *= o
        lot_fee = np.multiply(fill, self.units)
        cash = self._tmp[0]
        np.multiply(trade, lot_fee, out=cash)  # signed notional traded
        lot_fee *= self.fee
        np.abs(trade, out=self._tmp[1])
        self._tmp[1] *= lot_fee
        cash += self._tmp[1]
        self.cash -= cash
        return fill, lot_fee

    def _trade_one_lot(self, target: np.ndarray, o: np.ndarray) -> None:
        """K = 1: each env closes and/or opens at most one lot.

        Only ``entry`` is kept per step: with one lot, ``cost`` is ``entry * |pos|`` and
        ``entry_fee`` is ``fee * entry * units``; ``_derived_lot_state`` fills both in
        for the state. ``closed`` and ``wins`` are the rows of one [2, N] counter array
        (one add per step).
        """
        pos, units, tmp = self.pos, self.units, self._tmp
        trade = target - pos
        fill = np.sign(trade)
        fill *= self.slip
        fill += 1.0  # 1 + slip buying, 1 - slip selling (1 with no trade: unused)
        fill *= o
        value = np.multiply(fill, units, out=tmp[0])  # of one lot at the fill
        pay = np.abs(trade, out=tmp[1])
        pay *= self.fee
        pay += trade
        pay *= value  # trade * value + |trade| * fee * value
        self.cash -= pay
        traded = np.not_equal(trade, 0.0, out=self._traded)
        flags = self._flags  # [2, N] bool: closing a lot, closing it at a profit
        closing = np.not_equal(pos, 0.0, out=flags[0])
        closing &= traded
        entry = self.entry[:, 0]  # contiguous [N] view
        was = np.multiply(entry, units, out=tmp[1])  # the open lot's value at its fill
        gain = np.subtract(value, was, out=tmp[2])
        gain *= pos
        fees = np.add(value, was, out=tmp[3])
        fees *= self.fee  # entry fee + exit fee
        win = np.greater(gain, fees, out=flags[1])  # the closed lot's PnL > 0
        win &= closing
        self._counts += flags  # closed += closing, wins += win
        untraded = ~traded
        np.multiply(fill, traded, out=tmp[0])  # arithmetic select: no branch on random masks
        entry *= untraded
        entry += tmp[0]  # the new lot's fill if traded (when flat: unused)
        held = self.held  # 0 while flat
        held *= untraded
        held += target != 0.0  # +1 holding on, 1 on a new position, 0 when flat

    def _derived_lot_state(self) -> None:
        """K = 1: ``cost`` and ``entry_fee`` from ``entry`` (not kept up to date by the step)."""
        if self.K == 1:
            np.multiply(self.entry[:, 0], np.abs(self.pos), out=self.cost)
            self.entry_fee[:, 0] = self.entry[:, 0] * self.units * self.fee * np.abs(self.pos)

    def _trade_lots(self, target: np.ndarray, o: np.ndarray) -> None:
        """Any K: lots close FIFO from a ring buffer of K slots."""
        K = self.K
        pos = self.pos
        trade = target - pos  # signed lots bought (+) or sold (-), all at one fill
        same = target * pos > 0
        keep = np.where(same, np.minimum(np.abs(pos), np.abs(target)), 0.0)  # lots carried over
        fill, lot_fee = self._fill(trade, o)
        n_close = np.abs(pos) - keep
        if n_close.any():
            closing = (self._slot - self.head[:, None]) % K < n_close[:, None]
            side = np.sign(pos)[:, None]
            pnl = side * (fill[:, None] - self.entry) * self.units[:, None] - self.entry_fee - lot_fee[:, None]
            self.closed += n_close
            self.wins += np.count_nonzero(closing & (pnl > 0.0), axis=1)
            self.cost = np.where(keep == 0, 0.0, self.cost - _rowsum(np.where(closing, self.entry, 0.0)))
            self.head = (self.head + n_close.astype(np.int64)) % K
        n_open = np.abs(target) - keep
        if n_open.any():
            off = (self._slot - self.head[:, None]) % K
            opening = (off >= keep[:, None]) & (off < (keep + n_open)[:, None])  # [N, K]
            self.entry = np.where(opening, fill[:, None], self.entry)
            self.entry_fee = np.where(opening, lot_fee[:, None], self.entry_fee)
            self.cost += n_open * fill
        self.held = np.where(same, self.held + 1.0, target != 0)

    # ---------------------------------------------------------------- observe
    def observe(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Observations [len(rows), W+3] float32 at each env's current bar (all envs if None)."""
        W, t0 = self.W, self._t0
        if rows is None:  # all envs: plain arrays, and a slice when every env is at the same step
            pos, units, mark, cost, held = self.pos, self.units, self.mark, self.cost, self.held
            entry = self.entry[:, 0]
            window = self.z[:, t0 : t0 + W] if t0 >= 0 else self.z_win[self.rows, self.t]
        else:
            pos, units, mark, cost, held = (a[rows] for a in (self.pos, self.units, self.mark, self.cost, self.held))
            entry = self.entry[rows, 0]
            window = self.z_win[rows, self.t[rows]]
        m = len(pos)
        obs = np.empty((m, W + 3), np.float32)
        # the window rows as single 4W-byte items: one memcpy-like move per env
        np.copyto(obs[:, :W].view(self._win_item), window.view(self._win_item))
        f = self._feat[:, :m] if m <= self.n else np.empty((3, m))  # [3, m] float64, then one cast copy
        if self.K == 1:
            np.copyto(f[0], pos)  # pos / 1
        else:
            np.multiply(pos, 1.0 / self.K, out=f[0])
        upnl = f[1]
        if self.K == 1:  # sign(pos) = pos, |pos| * mark = mark and cost = entry while a lot is open
            np.subtract(mark, entry, out=upnl)
            upnl *= pos
        else:
            np.abs(pos, out=upnl)
            upnl *= mark
            upnl -= cost
            upnl *= np.sign(pos)
        upnl *= units
        upnl *= UPNL_SCALE / self.config.initial_cash
        np.minimum(upnl, UPNL_CLIP, out=upnl)
        np.maximum(upnl, -UPNL_CLIP, out=upnl)
        np.multiply(held, 1.0 / self.L, out=f[2])
        obs[:, W:] = f.T
        return obs

    def episode_stats(self, rows: np.ndarray | slice) -> dict[str, np.ndarray]:
        """Episode summary for ``rows``: reward, return ($), trades, wins, open lots, steps."""
        return {
            "reward": self.ep_reward[rows].copy(),
            "return": self.equity[rows] - self.config.initial_cash,
            "closed_trades": self.closed[rows].astype(np.int64),
            "winning_trades": self.wins[rows].astype(np.int64),
            "open_lots": np.abs(self.pos[rows]).astype(np.int64),
            "steps": self.t[rows].copy(),
        }

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """Complete state (arrays copied, RNG states as dicts)."""
        self._derived_lot_state()
        state: dict[str, Any] = {}
        for name in _STATE_ARRAYS:
            value = getattr(self, name)
            state[name] = value.astype(np.int64) if name in _INT_STATE else value.copy()
        if self.historical:  # the episode is its start offset; open/close are kept for readers
            state["start"] = self.start.copy()
            state["data"] = dict(self._fingerprint)
        else:
            state["z"] = self.z.copy()
        state["num_envs"] = self.n
        state["config"] = asdict(self.config)
        state["rngs"] = [None if g is None else g.bit_generator.state for g in self.rngs]
        state["pools"] = {"uniform": self._upool.get_state()}
        if self._zpool is not None:
            state["pools"]["normal"] = self._zpool.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state()`` output; later steps reproduce the original bit for bit."""
        if state["num_envs"] != self.n or state["config"] != asdict(self.config):
            raise ValueError("state was saved from an env with a different num_envs or config")
        values = {}
        for name in _STATE_ARRAYS:
            value = np.asarray(state[name])
            current = getattr(self, name)
            if value.shape != current.shape:
                raise ValueError(f"state[{name!r}] has shape {value.shape}, expected {current.shape}")
            values[name] = value.astype(current.dtype, copy=True)
        if "start" in state and not self.historical:
            raise ValueError("state was saved from an env on historical data; this env simulates its markets")
        if self.historical:
            start = self._restore_start(state, values.pop("open"), values.pop("close"))
        for name, value in values.items():
            if name == "open":
                self._open_t[...] = value.T
            elif name == "close":
                self._close_t[...] = value.T
            else:
                setattr(self, name, value)
        if self.historical:
            self.start[...] = start
            self._gather_returns(slice(None), start)
        elif "z" in state:  # simulated episodes: z came from the simulator's exact log returns
            self.z[...] = np.asarray(state["z"], dtype=np.float32)
        else:
            self._prepare_returns(slice(None), self._log_returns(self._close_t))
        self._sync_t()
        for i, st in enumerate(state["rngs"]):
            if st is None:
                self.rngs[i] = None
                continue
            if self.rngs[i] is None:
                self.rngs[i] = np.random.Generator(getattr(np.random, st["bit_generator"])())
            self.rngs[i].bit_generator.state = st
        self._pool_owner = list(self.rngs)
        pools = state.get("pools") or {}  # none in states saved before the pools existed
        self._upool.set_state(pools.get("uniform"))
        if self._zpool is not None:
            self._zpool.set_state(pools.get("normal"))


    def _restore_start(self, state: dict[str, Any], open_: np.ndarray, close: np.ndarray) -> np.ndarray:
        """Historical: the episode start offsets of a state, checked against this core's data.

        Refuses (ValueError) a state saved on other data: a different length or close
        checksum, or price windows that are not this data's bars at the saved offsets.
        States without offsets (saved before they existed) are located by their windows.
        """
        saved = state.get("data")
        if saved is not None and dict(saved) != self._fingerprint:
            raise ValueError(
                f"state was saved on different data ({saved.get('bars')} bars, close crc32 "
                f"{saved.get('close_crc32')}); this env has {self._fingerprint['bars']} bars, "
                f"close crc32 {self._fingerprint['close_crc32']}"
            )
        if "start" in state:
            start = np.asarray(state["start"]).astype(np.int64)
            if start.shape != (self.n,) or start.min() < 0 or start.max() >= self._top:
                raise ValueError(f"state['start'] must be {self.n} offsets in 0..{self._top - 1}")
        else:
            start = np.zeros(self.n, np.int64)
            for i in range(self.n):
                at = np.flatnonzero(self.data_close[: self._top] == close[i, 0])
                hits = [s for s in at.tolist() if np.array_equal(self.data_close[s : s + self.bars], close[i])
                        and np.array_equal(self.data_open[s : s + self.bars], open_[i])]
                if not hits:
                    raise ValueError("state's price windows are not in this env's data: it was saved on other data")
                start[i] = hits[0]
        idx = start[:, None] + np.arange(self.bars)
        if not (np.array_equal(self.data_open[idx], open_) and np.array_equal(self.data_close[idx], close)):
            raise ValueError("state's price windows differ from this env's data at its offsets: saved on other data")
        return start


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
