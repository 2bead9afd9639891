"""Observations: the normalised-return window and the position, PnL and time features.

Observation at bar ``t`` (decision ``j = t - W``), [W+3+F+E] float32 (F: the ``--features``
columns times the ``--feature-window`` windows, E: the ``--ema-spans``, 0 without them):

* ``[0:W]``  log returns of close for bars ``t-W+1..t``, each divided by the RMS
  of the ``W`` returns ending at that bar (for an episode's first ``W`` bars: of
  its first full window, bars ``1..W``), clipped to +-5 -- scale free and causal
  (nothing after bar ``t``, since ``t >= W``). On historical data the normalised
  returns of the whole file (up to the end of the market's span, if it has one) are
  computed once (``normalised_returns``), so the RMS
  window of an episode's first bars runs over the file's preceding bars (only the
  file's first ``W`` bars share its first full window);
* ``[W]``    position / K (in -1..1);
* ``[W+1]``  unrealised PnL of the open lots / initial cash * 10, clipped to +-10;
* ``[W+2]``  bars held in the current position / the time scale, clipped at 1 (0..1).
  The time scale is the episode length, unless the observer is given another one: a
  continuous backtest (``ppo_lstm.evaluation.backtest``) passes the training episode length, so
  a position held longer than a training episode reads 1, as at a training episode's
  end. In training (scale = episode length, position age <= L) nothing is clipped.
* ``[W+3:W+3+F]`` the ``--features`` columns' z-scores at bar ``t``, column ``j``'s over window ``k``
  (of K) at ``W+3 + j*K + k`` (``envs.data.features.stacked_zscores``);
* ``[W+3+F:]`` one entry per ``--ema-spans`` span: the log close's deviation from its EMA
  at bar ``t``, as a z-score (``envs.ema_deviation``; E entries, 0 without spans);

The markets write each episode's normalised returns into ``Observer.z`` ([N, W+L],
``z[:, b-1]`` is bar ``b``) with the two functions here; the observer cuts the
windows and adds the ledger's features. A historical market also writes each episode's
normalised feature columns at its decision bars into ``Observer.feat`` ([N, L+1, F+E]), and
both markets write the EMA deviations into its last E columns.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs.accumulate import accumulate_time
from envs.config import EnvConfig
from envs.data.features import FEATURE_CLIP
from envs.ema_deviation import EMA_CLIP

if TYPE_CHECKING:
    from envs.ledger import Ledger

RETURN_CLIP = 5.0
UPNL_SCALE = 10.0
UPNL_CLIP = 10.0
RMS_FLOOR = 1e-12  # floor of the RMS


def observation_space(config: EnvConfig) -> gym.spaces.Box:
    """Box [W+3+F+E] float32 with the bounds of the layout above."""
    w, f, e = config.window, config.num_feature_entries, len(config.spans)
    low = np.concatenate([np.full(w, -RETURN_CLIP), [-1.0, -UPNL_CLIP, 0.0], np.full(f, -FEATURE_CLIP),
                          np.full(e, -EMA_CLIP)])
    high = np.concatenate([np.full(w, RETURN_CLIP), [1.0, UPNL_CLIP, 1.0], np.full(f, FEATURE_CLIP),
                           np.full(e, EMA_CLIP)])
    low, high = low.astype(np.float32), high.astype(np.float32)
    return gym.spaces.Box(low, high, dtype=np.float32)


def normalised_returns(close: np.ndarray, window: int) -> np.ndarray:
    """Normalised log returns (float32) of a whole close series: ``z[b-1]`` is bar ``b``.

    Bar ``b >= W`` is ``r[b] / RMS(r[b-W+1..b])``; bars ``1..W-1`` use the RMS of the
    first full window (bars ``1..W``); clipped to +-5. Causal at every bar ``t >= W``.
    """
    r = np.diff(np.log(np.asarray(close, dtype=np.float64)))
    ms = _rms_of_returns(r, window)
    z = np.empty(len(r), np.float32)
    np.divide(r, ms, out=z, casting="same_kind")
    np.minimum(z, RETURN_CLIP, out=z)
    np.maximum(z, -RETURN_CLIP, out=z)
    return z


def _rms_of_returns(r: np.ndarray, window: int) -> np.ndarray:
    """``ms[b-1]``: the RMS (float64, >= RMS_FLOOR) of the ``window`` log returns ``r [n]`` ending at
    bar ``b`` (``r[b-1]`` is bar b's); bars ``1..W-1`` get the first full window's."""
    W = window
    ms = np.empty_like(r)
    ms[W - 1 :] = sliding_window_view(r * r, W).sum(axis=1)  # no running-sum cancellation
    ms[: W - 1] = ms[W - 1]
    np.multiply(ms, 1.0 / W, out=ms)
    np.maximum(ms, RMS_FLOOR * RMS_FLOOR, out=ms)
    np.sqrt(ms, out=ms)
    return ms


def rolling_rms(close: np.ndarray, window: int) -> np.ndarray:
    """RMS [n] float64 of the log returns of bars ``b-W+1..b`` for every bar ``b`` of a close
    series [n] (the RMS that divides bar b's return in :func:`normalised_returns`; bars before
    ``W`` get the first full window's, and bar 0 has no return before it and gets the same)."""
    r = np.diff(np.log(np.asarray(close, dtype=np.float64)))
    ms = _rms_of_returns(r, window)
    return np.concatenate([ms[:1], ms])


def normalise_paths(r: np.ndarray, window: int, csum: np.ndarray, ms: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Normalised returns of m episodes (the rule above) from time-major log returns r [W+L, m].

    Writes ``out`` [W+L, m] float32; ``csum`` [W+L+1, m] and ``ms`` [W+L, m] are float64
    scratch (preallocated: fresh multi-MB temporaries cost page faults). The window
    sums come from a running sum along time: short episodes, no cancellation worth
    the sliding sum's cost.
    """
    W = window
    csum[0] = 0.0  # csum[k] = sum of the first k squares
    np.multiply(r, r, out=csum[1:])
    accumulate_time(np.add, csum[1:])
    np.subtract(csum[W:], csum[:-W], out=ms[W - 1 :])  # sum of the W squares ending at each bar
    ms[: W - 1] = ms[W - 1]  # the first W bars share the first full window
    np.multiply(ms, 1.0 / W, out=ms)
    np.maximum(ms, RMS_FLOOR * RMS_FLOOR, out=ms)
    np.sqrt(ms, out=ms)  # RMS, >= RMS_FLOOR
    # float32 from here (clipping to +-5 commutes with the rounding: 5 is exact)
    np.divide(r, ms, out=out, casting="same_kind")
    np.minimum(out, RETURN_CLIP, out=out)
    np.maximum(out, -RETURN_CLIP, out=out)
    return out


class Observer:
    """Builds the observations [m, W+3+F+E] of N envs from ``z``, ``feat`` and a ledger."""

    def __init__(self, num_envs: int, config: EnvConfig, time_scale: int | None = None) -> None:
        n, W, L = num_envs, config.window, config.episode_length
        self.n, self.W, self.K, self.L = n, W, config.max_position, L
        scale = L if time_scale is None else int(time_scale)
        if scale < 1:
            raise ValueError(f"time_scale must be at least 1, got {scale}")
        self.per_bar_held = 1.0 / scale  # the time feature per bar held
        self.clip_time = scale < L  # only then can a position's age exceed the scale
        self.pnl_per_dollar = UPNL_SCALE / config.initial_cash
        self.z = np.zeros((n, W + L), np.float32)  # [N, W+L] normalised returns, z[:, b-1] = bar b
        self.z_win = sliding_window_view(self.z, W, axis=1)  # [N, L+1, W] view: the windows
        self._rows = np.arange(n)
        self._win_item = np.dtype(f"V{4 * W}")  # one window as a raw item: one memcpy-like move per env
        self._feat = np.empty((3, n))  # columns W..W+2 in float64, then one cast copy
        self.F = config.num_feature_entries + len(config.spans)  # feature columns' z-scores, then EMA deviations
        self.feat = np.zeros((n, L + 1, self.F), np.float32)  # [N, L+1, F+E]: decision j's at [:, j]

    def observe(self, ledger: Ledger, t: np.ndarray, t0: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Observations [m, W+3+F+E] float32 of envs ``rows`` (all if None) after ``t`` [N] decisions.

        While all envs are in step (``t0``: their common ``t``; -1 otherwise) the windows
        are one slice of ``z``, not a gather.
        """
        W = self.W
        if rows is None:
            pos, held = ledger.pos, ledger.held
            window = self.z[:, t0 : t0 + W] if t0 >= 0 else self.z_win[self._rows, t]
        else:
            pos, held = ledger.pos[rows], ledger.held[rows]
            window = self.z_win[rows, t[rows]]
        m = len(pos)
        obs = np.empty((m, W + 3 + self.F), np.float32)
        np.copyto(obs[:, :W].view(self._win_item), window.view(self._win_item))
        f = self._feat[:, :m] if m <= self.n else np.empty((3, m))  # [3, m] float64
        if self.K == 1:
            np.copyto(f[0], pos)  # pos / 1
        else:
            np.multiply(pos, 1.0 / self.K, out=f[0])
        upnl = ledger.unrealised(f[1], rows)
        upnl *= self.pnl_per_dollar
        np.minimum(upnl, UPNL_CLIP, out=upnl)
        np.maximum(upnl, -UPNL_CLIP, out=upnl)
        np.multiply(held, self.per_bar_held, out=f[2])
        if self.clip_time:
            np.minimum(f[2], 1.0, out=f[2])
        obs[:, W:W + 3] = f.T
        if self.F:
            if rows is None:
                obs[:, W + 3:] = self.feat[:, t0] if t0 >= 0 else self.feat[self._rows, t]
            else:
                obs[:, W + 3:] = self.feat[rows, t[rows]]
        return obs
