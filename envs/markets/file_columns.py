"""A data file's observation columns, computed once per file and setting: the normalised
returns, the feature columns' z-scores and the EMA deviations of its bars ``0..hi-1``.

Every market built on the same :class:`~envs.data.MarketData` object with the same
settings (each hold-out backtest of a run, each walk-forward trade of a window) reads
the same read-only arrays instead of recomputing them over the whole file.

Every column is causal (a bar's value reads no later bar; the returns' from bar ``window``
on), so the whole file is computed once per setting and a span ending at ``hi`` gets a copy of
its first bars with zeros after them: a backtest of many episodes, each ending elsewhere,
computes the file once, not once per episode. A span too short for the returns' first
window (``hi <= window``) is computed on its own, as its early bars depend on ``hi``.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Optional

import numpy as np

from envs.data.features import stacked_zscores
from envs.ema_deviation import ema_deviations
from envs.observation import normalised_returns, rolling_rms

if TYPE_CHECKING:
    from envs.data import MarketData

Key = tuple[int, int, tuple[str, ...], tuple[int, ...], tuple[int, ...]]  # feature_window: its windows
_KEPT_PER_FILE = 4  # settings kept per file: a run uses one or two (training span, hold-out span)
_CACHE: "weakref.WeakKeyDictionary[MarketData, dict[Key, tuple[np.ndarray, Optional[np.ndarray]]]]" = \
    weakref.WeakKeyDictionary()


def file_columns(data: MarketData, hi: int, window: int, names: tuple[str, ...], feature_window: int | tuple[int, ...],
                 spans: tuple[int, ...]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """``(z, f)`` of ``data``'s bars ``0..hi-1``, both read-only: ``z`` ``[n]`` float32, bar b's
    normalised return (``window`` bars) at ``b - 1`` and zeros from ``hi - 1`` on; ``f`` ``[n, F * K + E]``
    float32, the ``names`` columns' z-scores over the K ``feature_window`` windows (one int: K = 1), in
    ``envs.data.features.stacked_zscores``' order, then the deviations from the EMAs of ``spans``, zeros
    from ``hi`` on (None without either)."""
    kept = _CACHE.setdefault(data, {})
    feature_window = (feature_window,) if isinstance(feature_window, int) else tuple(feature_window)
    key = (hi, window, names, feature_window, spans)
    if key not in kept:
        n = len(data.close)
        if hi <= window or hi >= n:  # its own span, or the whole file
            value = _compute(data, *key)
        else:
            z_all, f_all = _kept(kept, (n, window, names, feature_window, spans), data)
            value = _prefix(z_all, hi - 1), (None if f_all is None else _prefix(f_all, hi))
        _keep(kept, key, value)
    return kept[key]


def _kept(kept: dict[Key, tuple[np.ndarray, Optional[np.ndarray]]], key: Key, data: MarketData
          ) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """The columns of ``key`` from ``kept``, computed and kept if missing."""
    if key not in kept:
        _keep(kept, key, _compute(data, *key))
    return kept[key]


def _keep(kept: dict[Key, tuple[np.ndarray, Optional[np.ndarray]]], key: Key,
          value: tuple[np.ndarray, Optional[np.ndarray]]) -> None:
    """Keep ``value`` under ``key``, dropping the oldest span's first (the whole file's last)."""
    while len(kept) >= _KEPT_PER_FILE:
        spans = [k for k in kept if k[0] != len(value[0])] or list(kept)
        kept.pop(spans[0])
    kept[key] = value


def _prefix(full: np.ndarray, rows: int) -> np.ndarray:
    """A read-only copy of ``full`` with its rows from ``rows`` on zeroed."""
    out = np.zeros_like(full)
    out[:rows] = full[:rows]
    out.flags.writeable = False
    return out


def _compute(data: MarketData, hi: int, window: int, names: tuple[str, ...], windows: tuple[int, ...],
             spans: tuple[int, ...]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    o = np.ascontiguousarray(data.open, dtype=np.float64)
    c = np.ascontiguousarray(data.close, dtype=np.float64)
    z = np.zeros(len(c), np.float32)
    z[: hi - 1] = normalised_returns(c[:hi], window)
    z.flags.writeable = False
    if not (names or spans):
        return z, None
    entries = len(names) * len(windows)
    f = np.zeros((len(c), entries + len(spans)), np.float32)
    if names:
        assert data.features is not None
        f[:hi, :entries] = stacked_zscores(data.features[:hi], windows)
    if spans:
        rms = rolling_rms(c[:hi], window)[:, None]
        f[:hi, entries:] = ema_deviations(o[:1], c[:hi, None], rms, window, spans)[:, 0]
    f.flags.writeable = False
    return z, f
