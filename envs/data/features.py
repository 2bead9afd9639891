"""Feature columns: how a data file's extra columns become observation entries.

``--features vol_z,rsi`` names numeric columns of the data file (matched
case-insensitively). Each one is normalised on its own, causally, by a rolling
z-score and clipped; the agent sees the value at the decision bar only (its LSTM
carries the memory of earlier bars).

The rule, for one column ``x`` and bar ``b`` (the same in training, in every
backtest and bar by bar in :class:`FeatureNormaliser`)::

    values  = the defined values of x at bars max(0, b - N + 1) .. b   (N: a --feature-window, FEATURE_WINDOW by default)
    c       = how many there are (1..N: fewer only in the column's first N - 1 defined bars)
    mean    = sum(values) / c,  summed from bar b backwards
    std     = sqrt(sum((values - mean) ** 2) / c),  summed the same way (population std)
    z[b]    = (x[b] - mean) / std, clipped to +-FEATURE_CLIP,
              or 0 where std <= STD_FLOOR_REL * |mean| + STD_FLOOR_ABS (a constant stretch of
              the column, whose spread is rounding noise; STD_FLOOR_ABS is 0, so the test is
              relative and a column's scale never matters)

Every defined value must be 0 or of a magnitude within [FEATURE_MIN_ABS, FEATURE_MAX_ABS]:
beyond that, ``(x - mean) ** 2`` overflows float64 (or underflows to 0). The loader refuses
such a value, naming file, column and row; as z is the same for ``x`` and ``x * k`` (k > 0),
rescaling the column fixes it without changing what the agent sees.

Several windows (``--feature-window 256,1024,4096``) give each column one z-score per window:
:func:`stacked_zscores` puts column ``j``'s z-score over window ``k`` (of K) at entry ``j * K + k``,
the columns in ``--features`` order and, within one, the windows in increasing order. One window
is the plain :func:`feature_zscores`.

"Defined" means not NaN: a column may start with NaN rows (an indicator's warm-up),
which count as absent; the loader refuses a NaN, inf or text value after a column's
first defined row (``envs.data.loading``). Episodes and backtests take their first decision
at or after the first bar where every feature is defined
(:func:`first_defined_bar`). Nothing after bar ``b`` is read, so ``z`` of a file is
the same whether or not later bars exist.

The sums are accumulated in float64, one term at a time in a fixed order (bar ``b``,
then ``b-1``, ...), so the value at a bar depends only on the values in its window,
never on how many rows were normalised together: :func:`feature_zscores` on a whole
file and :class:`FeatureNormaliser` fed bar by bar give bit-identical float32 results.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Sequence

import numpy as np

FEATURE_WINDOW = 1024  # N by default (--feature-window): bars of a feature's rolling mean and std
SAVED_FEATURE_WINDOW = 256  # N of a config saved without feature_window: the default before 1,024
FEATURE_CLIP = 5.0  # normalised features are clipped to +-this, as the returns are
STD_FLOOR_REL = 1e-9  # a std this small next to |mean| is a constant column's rounding noise
STD_FLOOR_ABS = 0.0  # no absolute floor: a column of tiny values is scaled like any other (kept for the ONNX metadata)
# |value| bounds whose window sums of squares stay finite and normal in float64 (1e150 ** 2 x 65,536 < 1.8e308)
FEATURE_MAX_ABS = 1e150
FEATURE_MIN_ABS = 1e-150
_CHUNK = 8192  # rows normalised at once (bounds the float64 scratch)
MIN_FEATURE_WINDOW, MAX_FEATURE_WINDOW = 2, 65_536  # a z-score needs 2 values; the rolling sums cost window x bars


def parse_feature_names(text: str | None) -> tuple[str, ...]:
    """``"vol_z, rsi"`` -> ``("vol_z", "rsi")``; None or "" -> ``()``. ValueError for an empty
    name or a name given twice (case-insensitively)."""
    if text is None or not str(text).strip():
        return ()
    names = tuple(part.strip() for part in str(text).split(","))
    if any(not name for name in names):
        raise ValueError(f"--features {text!r} has an empty column name; write them as COL1,COL2")
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in seen:
            raise ValueError(f"--features names the column {name!r} twice; name each column once")
        seen[name.lower()] = name
    return names


def parse_feature_windows(value: int | str | None) -> tuple[int, ...]:
    """``1024`` or ``"256,1024,4096"`` -> the windows ``(256, 1024, 4096)``; None -> ``(FEATURE_WINDOW,)``.
    ValueError (one fix-it line) for a window out of range, given twice or out of increasing order."""
    if value is None:
        return (FEATURE_WINDOW,)
    parts = [value] if isinstance(value, int) and not isinstance(value, bool) else str(value).split(",")
    windows: list[int] = []
    for part in parts:
        try:
            window = int(str(part).strip())
        except ValueError:
            raise ValueError(f"--feature-window {value!r}: {str(part).strip()!r} is not a whole number of bars; "
                             f"write N or N,N,... in increasing order, e.g. 1024 or 256,1024,4096") from None
        if not MIN_FEATURE_WINDOW <= window <= MAX_FEATURE_WINDOW:
            raise ValueError(f"--feature-window must be {MIN_FEATURE_WINDOW} to {MAX_FEATURE_WINDOW} bars, got {window}")
        if window in windows:
            raise ValueError(f"--feature-window {value!r} gives the window {window} twice; give each window once")
        windows.append(window)
    if windows != sorted(windows):
        raise ValueError(f"--feature-window {value!r}: give the windows in increasing order, "
                         f"{','.join(map(str, sorted(windows)))}")
    return tuple(windows)


def feature_window_setting(windows: Sequence[int]) -> int | str:
    """The ``feature_window`` setting of ``windows``: one window as its int, several as ``"256,1024,4096"``."""
    return int(windows[0]) if len(windows) == 1 else ",".join(str(int(w)) for w in windows)


def canonical_feature_window(value: Any) -> Any:
    """``value`` as the setting saves it (:func:`feature_window_setting`: ``"512"`` -> 512,
    ``" 256, 1024"`` -> ``"256,1024"``); a value that does not parse is left for validation to refuse."""
    try:
        return feature_window_setting(parse_feature_windows(value))
    except (TypeError, ValueError):
        return value


def _window_stats(values: np.ndarray, defined: np.ndarray, window: int, terms: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std ``[m, F]`` of the last ``window`` rows' defined values, for the
    last ``m = len(values) - window + 1`` rows of ``values [len, F]`` (float64, NaN already 0).

    Only the first ``terms`` of the ``window`` terms are added: the caller stops where every row
    of a term lies in the zero padding before the file's first bar. Such a term adds exact zeros
    (+0.0 to a sum that started at +0.0 and so is never -0.0), so leaving it out changes no bit;
    a short history (a live feed's first bars, a file shorter than the window) costs its length,
    not the window's."""
    m = values.shape[0] - window + 1
    last = values.shape[0]
    total = np.zeros((m, values.shape[1]))
    count = np.zeros((m, values.shape[1]))
    for k in range(terms):  # bar b, then b-1, ...: a fixed order per output row
        total += values[last - m - k: last - k]
        count += defined[last - m - k: last - k]
    np.maximum(count, 1.0, out=count)
    mean = total / count
    spread = np.zeros_like(total)
    for k in range(terms):
        d = values[last - m - k: last - k] - mean
        d *= defined[last - m - k: last - k]
        spread += d * d
    return mean, np.sqrt(spread / count)


def feature_zscores(values: np.ndarray, window: int = FEATURE_WINDOW, last: int | None = None) -> np.ndarray:
    """Normalised features ``[n, F]`` float32 of raw columns ``values [n, F]`` (the module's rule);
    with ``last``, those of the last ``last`` rows only ``[last, F]``, the same bits for a fraction
    of the work (a live feed's new bar after the rows it keeps).

    NaN rows (absent values) give NaN; every other row is finite and within +-FEATURE_CLIP.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n, f = x.shape
    defined = ~np.isnan(x)
    filled = np.where(defined, x, 0.0)
    pad = np.zeros((window - 1, f))
    padded = np.concatenate([pad, filled])  # [window-1+n, F]
    padded_def = np.concatenate([pad, defined.astype(np.float64)])
    start = 0 if last is None else max(0, n - last)
    out = np.empty((n - start, f), np.float32)
    for lo in range(start, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        # term k reads rows lo-k..hi-1-k: all padding once k >= hi
        mean, std = _window_stats(padded[lo: hi + window - 1], padded_def[lo: hi + window - 1], window,
                                  min(window, hi))
        z = _zscore(filled[lo:hi], mean, std)
        z[~defined[lo:hi]] = np.nan
        out[lo - start:hi - start] = z
    return out


def stacked_zscores(values: np.ndarray, windows: Sequence[int], last: int | None = None) -> np.ndarray:
    """:func:`feature_zscores` over each of ``windows`` (K of them) for raw columns ``values [n, F]``:
    ``[n, F * K]`` float32 (``[last, F * K]`` with ``last``), column ``j``'s window ``k`` at ``j * K + k``.
    One window: :func:`feature_zscores` itself."""
    if len(windows) == 1:
        return feature_zscores(values, windows[0], last)
    k = len(windows)
    parts = [feature_zscores(values, window, last) for window in windows]  # K x [m, F]
    out = np.empty((parts[0].shape[0], parts[0].shape[1] * k), np.float32)
    for i, part in enumerate(parts):
        out[:, i::k] = part
    return out


def _zscore(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    flat = std <= STD_FLOOR_REL * np.abs(mean) + STD_FLOOR_ABS
    z = (x - mean) / np.where(flat, 1.0, std)
    z[flat] = 0.0
    return np.clip(z, -FEATURE_CLIP, FEATURE_CLIP)


def out_of_range(values: np.ndarray) -> np.ndarray:
    """Where ``values`` (any shape, NaN = absent) holds a nonzero magnitude outside
    [FEATURE_MIN_ABS, FEATURE_MAX_ABS] (inf included): a value the z-score cannot take."""
    size = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        return (size > FEATURE_MAX_ABS) | ((size > 0) & (size < FEATURE_MIN_ABS))


def first_defined_bar(values: np.ndarray | None) -> int:
    """The first row where every column of ``values [n, F]`` is defined (0 without columns;
    ``n`` when some column is never defined)."""
    if values is None or values.size == 0:
        return 0
    defined = ~np.isnan(np.asarray(values, dtype=np.float64).reshape(len(values), -1))
    every = defined.all(axis=1)
    return int(np.argmax(every)) if every.any() else len(values)


class FeatureNormaliser:
    """The same rule bar by bar, for a live feed: ``update(raw [F]) -> z [F * K]`` float32.

    ``window``: one window or K of them (:func:`stacked_zscores`' layout). Keeps the last
    ``max(windows)`` raw rows; ``update`` gives exactly what :func:`stacked_zscores` gives for
    that bar of a file holding the same rows (NaN while a column has not been defined yet).
    """

    def __init__(self, num_features: int, window: int | Sequence[int] = FEATURE_WINDOW) -> None:
        self.windows = (int(window),) if isinstance(window, (int, np.integer)) else tuple(map(int, window))
        self.window = max(self.windows)
        self.num_features = num_features
        self._rows: deque[np.ndarray] = deque(maxlen=self.window)

    def update(self, raw: Sequence[float] | np.ndarray) -> np.ndarray:
        """ValueError for a value :func:`out_of_range`."""
        row = np.asarray(raw, dtype=np.float64).reshape(self.num_features)
        if out_of_range(row).any():
            j = int(np.argmax(out_of_range(row)))
            raise ValueError(f"feature {j} is {row[j]:g}, outside the magnitudes "
                             f"{FEATURE_MIN_ABS:g}..{FEATURE_MAX_ABS:g} "
                             f"a z-score can square in float64; rescale the column")
        self._rows.append(row)
        return self.current()

    def extend(self, rows: Iterable[Sequence[float]]) -> np.ndarray:
        """Feed several bars (oldest first); returns the last one's z."""
        out = np.full(self.num_features * len(self.windows), np.nan, np.float32)
        for row in rows:
            out = self.update(row)
        return out

    def current(self) -> np.ndarray:
        """z [F * K] of the newest bar fed (NaN before any)."""
        if not self._rows:
            return np.full(self.num_features * len(self.windows), np.nan, np.float32)
        return stacked_zscores(np.stack(list(self._rows)), self.windows, last=1)[-1]
