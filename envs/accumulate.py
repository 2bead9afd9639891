"""Running sums (any ufunc) along time for many series at once, bit for bit NumPy's.

Both functions compute ``out[t] = ufunc(out[t-1], x[t])`` in the order ``ufunc.accumulate``
does: :func:`accumulate_time` in place on a time-major ``[T, m]`` array (m series, e.g. envs),
:func:`accumulate` on a series-major ``[m, T]`` one. With many series (from
``_LOOP_SERIES_TIME_MAJOR`` or ``_LOOP_SERIES_ENV_MAJOR``) they loop over time, one ufunc call
across every series a step; with few, they call ``ufunc.accumulate``.
"""
from __future__ import annotations

import numpy as np

_LOOP_SERIES_TIME_MAJOR = 64  # from this many series, loop over time ([T, m] arrays)
_LOOP_SERIES_ENV_MAJOR = 512  # from this many series, transpose and loop ([m, T] arrays)


def accumulate_time(ufunc: np.ufunc, x: np.ndarray, src: np.ndarray | None = None) -> None:
    """``x[t] = ufunc(x[t-1], src[t])`` for t >= 1, in place on time-major x [T, m].

    ``src`` defaults to ``x`` (an in-place accumulate); ``x[0]`` is taken as given.
    Bit for bit ``ufunc.accumulate`` along axis 0.
    """
    few = x.shape[1] < _LOOP_SERIES_TIME_MAJOR
    if src is not None and src is not x and few:
        x[1:] = src[1:]
        src = None
    if src is None and few:
        ufunc.accumulate(x, axis=0, out=x)
        return
    src = x if src is None else src
    for t in range(1, len(x)):
        ufunc(x[t - 1], src[t], out=x[t])


def accumulate(ufunc: np.ufunc, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``ufunc.accumulate(x, axis=1)`` for x [m, T] (series-major), bit for bit."""
    m, length = x.shape
    if m < _LOOP_SERIES_ENV_MAJOR or length < 2:
        return ufunc.accumulate(x, axis=1, out=out)
    xt = np.ascontiguousarray(x.T)  # [T, m]
    accumulate_time(ufunc, xt)
    if out is None:
        return xt.T
    out[...] = xt.T
    return out
