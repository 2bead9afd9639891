"""Price memory beyond the window: the deviation of the log price from its EMAs (``--ema-spans``).

The return window shows the last ``W`` bars. A market whose edge is the distance from a
level set long ago (mean reversion to a slow average, a trend that builds over hundreds of
bars) needs more: ``bench/ou_memory.py`` measures how little of the ``ou`` market's edge the
window alone carries. ``--ema-spans 200`` adds one observation entry per span: how far the
log close is from its exponential moving average, in units of what that distance would be
on a random walk with the window's volatility.

The rule, for span ``N`` and one price series (the same in training, in every backtest and
bar by bar in ``ppo_lstm.deploy``)::

    alpha   = 2 / (N + 1),  a = 1 - alpha          (pandas' ewm(span=N, adjust=False))
    x       = log open of the first bar, then the log close of every bar
    level   = x[0]; then level = level * a + x * alpha for each close, in float64
    d[b]    = log close[b] - level after bar b's close
    rms[b]  = RMS of the log returns of bars b-W+1..b (``envs.observation.rolling_rms``)
    z[b]    = d[b] * sqrt(1 - a^2) / a / rms[b], clipped to +-EMA_CLIP   (bars b >= W; 0 before)

``d`` is ``a`` times the returns since the start, each weighted ``a^age``: on a random walk of
volatility ``rms`` its standard deviation is ``rms * a / sqrt(1 - a^2)``, so ``z`` is a
scale-free z-score. A simulated episode's EMA starts at its first open (bar 0); a data
file's at the file's first bar, so a live feed started later reads the same values once
a few spans of bars have passed (the weight of the start decays as ``a^bars``).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

EMA_CLIP = 5.0  # z is clipped to +-this, as the returns are
START_WEIGHT = 0.01  # a live feed's EMA reads as the file's once its start weighs at most this
MIN_SPAN, MAX_SPAN = 2, 100_000
DEFAULT_EMA_SPANS = "500"  # --ema-spans by default: one deviation, from the EMA(500) (docs/environments.md)
NO_SPANS = ("", "none")  # --ema-spans none (or ""): no EMA deviations


def parse_ema_spans(text: str | None) -> tuple[int, ...]:
    """``"64,200"`` -> ``(64, 200)``; None, "" or "none" -> ``()``. ValueError (a fix-it line) otherwise."""
    if text is None or str(text).strip().lower() in NO_SPANS:
        return ()
    spans = []
    for part in str(text).split(","):
        try:
            span = int(part.strip())
        except ValueError:
            raise ValueError(f"--ema-spans {text!r}: {part.strip()!r} is not a whole number of bars; "
                             f"write them as N[,N...], e.g. 200 or 64,200, or none") from None
        if not MIN_SPAN <= span <= MAX_SPAN:
            raise ValueError(f"--ema-spans {text!r}: a span must be {MIN_SPAN}..{MAX_SPAN} bars, got {span}")
        if span in spans:
            raise ValueError(f"--ema-spans {text!r} gives the span {span} twice; give each span once")
        spans.append(span)
    return tuple(spans)


def settled_bars(span: int, weight: float = START_WEIGHT) -> int:
    """The bars after which an EMA of ``span`` that started at its first bar weighs that start
    ``a^bars`` <= ``weight``, so it reads as one that started much earlier (to about ``weight``
    of the distance between the two starts)."""
    a = 1.0 - 2.0 / (span + 1.0)
    return math.ceil(math.log(weight) / math.log(a)) if a > 0.0 else 1


def short_history(spans: tuple[int, ...], bars: int) -> Optional[str]:
    """Why ``bars`` bars are too few for the EMAs of ``spans`` to read as on the whole file
    (their start still weighs more than :data:`START_WEIGHT`); None when they are enough."""
    short = [n for n in spans if bars < settled_bars(n)]
    if not short:
        return None
    span = max(short)
    a = 1.0 - 2.0 / (span + 1.0)
    return (f"the history has {bars} bars, fewer than the {settled_bars(span)} an EMA of span {span} (--ema-spans) "
            f"needs to forget where it started (its start still weighs {a ** bars:.0%}), so its deviation is not "
            f"yet what a backtest on the whole file reads; warm up on at least {settled_bars(span)} bars")


def ema_weights(spans: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, alpha, scale)`` [E] float64 of ``spans``: the level's decay, the new close's
    weight, and the factor ``sqrt(1 - a^2) / a`` that makes a deviation a z-score."""
    alpha = np.array([2.0 / (n + 1.0) for n in spans])
    a = 1.0 - alpha
    scale = np.array([math.sqrt(1.0 - k * k) / k for k in a.tolist()])
    return a, alpha, scale


class EmaLevels:
    """The EMAs of ``m`` log-price series, one per span: ``level`` [m, E] float64.

    ``push`` applies one bar's closes; every caller (a file, a simulated episode, a live
    feed) runs this same elementwise float64 update, so equal inputs give equal bits.
    """

    def __init__(self, spans: tuple[int, ...], log_first_open: np.ndarray) -> None:
        """``log_first_open`` [m]: the log open of each series' first bar (the EMAs' start)."""
        self.spans = tuple(spans)
        self.a, self.alpha, self.scale = ema_weights(self.spans)
        start = np.asarray(log_first_open, dtype=np.float64).reshape(-1, 1)
        self.level = np.repeat(start, len(self.spans), axis=1)  # [m, E]

    def push(self, log_close: np.ndarray) -> np.ndarray:
        """Update with one bar's log closes [m]; returns the levels [m, E] (the live array)."""
        x = np.asarray(log_close, dtype=np.float64).reshape(-1, 1)
        self.level = self.level * self.a + x * self.alpha
        return self.level

    def z(self, log_close: np.ndarray, rms: np.ndarray) -> np.ndarray:
        """z [m, E] float32 of the current levels, for the bar with log closes [m] and window RMS [m]."""
        x = np.asarray(log_close, dtype=np.float64).reshape(-1, 1)
        return _z(x, self.level, self.scale, np.asarray(rms, dtype=np.float64).reshape(-1, 1))


def _z(log_close: np.ndarray, level: np.ndarray, scale: np.ndarray, rms: np.ndarray) -> np.ndarray:
    """The rule's z (float32) from log closes and RMS ``[..., 1]`` and levels ``[..., E]``: the one
    elementwise arithmetic of a bar and of a whole file, so both give the same bits."""
    d = (log_close - level) * scale
    d /= rms
    np.clip(d, -EMA_CLIP, EMA_CLIP, out=d)
    return d.astype(np.float32)


def ema_deviations(first_open: np.ndarray, close: np.ndarray, rms: np.ndarray, window: int,
                   spans: tuple[int, ...]) -> np.ndarray:
    """z [T, m, E] float32 of ``m`` series: ``first_open`` [m], time-major ``close`` [T, m]
    (bar 0 first) and ``rms`` [T, m] (bar b's window RMS; read only at b >= ``window``).
    Bars before ``window`` are 0: no decision reads them.

    The same bits as :class:`EmaLevels` fed bar by bar: the levels follow the same float64
    recurrence (one series in Python floats, which round as NumPy's float64 does; many
    series a bar at a time), and z is the same elementwise arithmetic over all bars at once.
    """
    close = np.asarray(close, dtype=np.float64)
    steps, m = close.shape
    logc = np.log(close)  # [T, m]
    a, alpha, scale = ema_weights(tuple(spans))
    level = np.empty((steps, m, len(spans)))  # after each bar's close
    start = np.log(np.asarray(first_open, dtype=np.float64)).reshape(m)
    if m == 1:  # a data file: a long loop over Python floats, ~100x faster than one over 1-element arrays
        column = logc[:, 0].tolist()
        for e, (keep, weight) in enumerate(zip(a.tolist(), alpha.tolist())):
            value, values = float(start[0]), []
            for x in column:
                value = value * keep + x * weight
                values.append(value)
            level[:, 0, e] = values
    else:
        levels = EmaLevels(spans, start)
        for b in range(steps):
            level[b] = levels.push(logc[b])
    out = np.zeros((steps, m, len(spans)), np.float32)
    if steps > window:
        out[window:] = _z(logc[window:, :, None], level[window:], scale,
                          np.asarray(rms, dtype=np.float64)[window:, :, None])
    return out
