"""A stream's rolling inputs: the normalised returns of the last bars, the feature normaliser and the EMAs.

``ReturnWindow`` keeps the last ``W`` closes and the normalised returns of the last ``W``
bars, computed by the env's ``envs.observation.normalised_returns`` (bit for bit the
values of the whole file). ``FeatureWindow`` keeps the feature columns' raw rows of the
last ``max(--feature-window)`` bars and the last bar's z-scores over each window, by
``envs.data.features.stacked_zscores`` (the rule of ``FeatureNormaliser``). ``EmaWindow`` keeps the ``--ema-spans`` EMAs of the log
close (``envs.ema_deviation.EmaLevels``, started at the stream's first open) and the last bar's
deviations, with the RMS of ``envs.observation.rolling_rms`` on the last ``W + 1`` closes (bit for
bit the values the historical market computes on the whole file). All three are saved in and
restored from the policy state.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from envs.data.features import (FEATURE_CLIP, STD_FLOOR_ABS, STD_FLOOR_REL, feature_window_setting,
                                parse_feature_windows, stacked_zscores)
from envs.ema_deviation import EMA_CLIP, EmaLevels
from envs.observation import normalised_returns, rolling_rms

from ..errors import UsageError


def feature_constants(window: int | str) -> dict[str, Any]:
    """The feature normaliser's constants, as this version applies them (``envs.data.features``) with
    the ``--feature-window`` setting ``window`` (``1024``, or ``"256,1024,4096"`` for several)."""
    return {"window": window, "clip": FEATURE_CLIP, "std_floor_rel": STD_FLOOR_REL,
            "std_floor_abs": STD_FLOOR_ABS}


class ReturnWindow:
    """The last ``W`` closes and the normalised returns ``values`` [W] float32 of the last ``W`` bars."""

    def __init__(self, window: int) -> None:
        self.W = window
        self.reset()

    def reset(self) -> None:
        self.closes: list[float] = []  # the last W closes (W + 1 while a bar is consumed)
        self.values = np.zeros(self.W, np.float32)

    def push(self, close: float, bars: int) -> None:
        """The normalised return of the new bar (``bars``: bars consumed, this one included), by
        ``normalised_returns`` on the last W + 1 closes (at the stream's bar W: bars 1..W, which
        share the first full window's RMS)."""
        W, closes = self.W, self.closes
        closes.append(close)
        if bars == W + 1:
            self.values[:] = normalised_returns(np.array(closes), W)
        elif bars > W + 1:
            self.values[:-1] = self.values[1:]
            self.values[-1] = normalised_returns(np.array(closes), W)[-1]
        if len(closes) > W:
            del closes[0]

    def state(self) -> dict[str, Any]:
        """The policy state's ``closes`` and ``window`` entries."""
        return {"closes": list(self.closes), "window": self.values.tolist()}

    def restore(self, closes: Any, window: Any) -> None:
        """Read the entries of :meth:`state` back (checked by :meth:`fits`)."""
        self.closes = [float(v) for v in closes]
        self.values = np.asarray(window, dtype=np.float32)

    def fits(self, bars: int) -> bool:
        """The closes and returns are those of a stream that consumed ``bars`` bars."""
        return len(self.closes) == min(bars, self.W) and self.values.shape == (self.W,)


class FeatureWindow:
    """The feature normaliser of a stream: the raw rows [F] float64 of the last ``max(windows)`` bars
    (the training ``--feature-window``; NaN: not defined yet) and ``z`` [F * K] float32, the last bar's
    normalised features over the K windows (``stacked_zscores``' layout)."""

    def __init__(self, names: tuple[str, ...], window: int | str) -> None:
        self.names = tuple(names)
        self.windows = parse_feature_windows(window)
        self.window = feature_window_setting(self.windows)  # the setting, as the state records it
        self.kept = max(self.windows)  # raw rows kept: the longest window's
        self.reset()

    def reset(self) -> None:
        self.rows: deque[np.ndarray] = deque(maxlen=self.kept)
        self.z = np.zeros(len(self.names) * len(self.windows), np.float32)

    def defined(self) -> bool:
        """Every feature defined at the last bar (always true without features)."""
        return not np.isnan(self.z).any()

    def undefined(self) -> list[str]:
        """The columns without a value at the last bar."""
        first = self.z.reshape(len(self.names), len(self.windows))[:, 0]  # a column's windows are NaN together
        return [name for name, z in zip(self.names, first.tolist()) if math.isnan(z)]

    def push(self, raw: np.ndarray, z: np.ndarray) -> None:
        """Keep one bar's raw row ``raw`` [F] and its normalised values ``z`` [F * K]."""
        self.rows.append(raw.copy())
        self.z = z

    def add(self, raw: np.ndarray, where: str) -> None:
        """Normalise one bar's raw row ``raw`` [1, F] after the rows kept, and keep both."""
        z = self.normalise(raw, where)
        self.push(raw[0], z[0])

    def normalise(self, raw: np.ndarray, where: str) -> np.ndarray:
        """The normalised features [n, F * K] float32 of new raw rows ``raw`` [n, F] after the rows
        kept: ``stacked_zscores`` of them all (a row's value depends only on its windows).
        UsageError for inf, or a NaN after a column's first value (the loader's rules)."""
        previous = list(self.rows)
        defined = ~np.isnan(raw)
        if np.isinf(raw).any():
            raise UsageError(f"{where}: an infinite value in feature column "
                             f"{self.names[int(np.argmax(np.isinf(raw).any(axis=0)))]!r}")
        seen = ~np.isnan(previous[-1]) if previous else np.zeros(raw.shape[1], bool)
        after_first = np.logical_or.accumulate(defined, axis=0) | seen  # [n, F]: the column has had a value
        gap = after_first & ~defined
        if gap.any():
            j = int(np.argmax(gap.any(axis=0)))
            raise UsageError(f"{where}: no value (NaN) for feature {self.names[j]!r} after its first value; "
                             f"only a column's leading bars (its warm-up) may lack one")
        rows = np.concatenate([np.stack(previous), raw]) if previous else raw
        return stacked_zscores(rows, self.windows, last=len(raw))

    def state(self) -> dict[str, Any]:
        """The names, the constants and the rows as JSON data (NaN as None)."""
        return {"names": list(self.names), **feature_constants(self.window),
                "rows": [[None if math.isnan(v) else v for v in row.tolist()] for row in self.rows]}

    def restore(self, saved: Any, bars: int) -> None:
        """The rows of ``state()`` after ``bars`` bars; ValueError unless they fit these names
        and constants (UsageError for other constants)."""
        nfeat = len(self.names)
        if not nfeat and saved is None:
            return  # a state of a policy without features may lack the entry
        if not isinstance(saved, dict):
            raise ValueError("no 'features' entry")
        if saved.get("names") != list(self.names):
            raise ValueError(f"its feature normaliser's columns {saved.get('names')} are not the policy's "
                             f"{list(self.names)}")
        if not nfeat:
            return
        ours = feature_constants(self.window)
        other = [f"{k} {saved.get(k)!r} (now {v!r})" for k, v in ours.items() if saved.get(k) != v]
        if other:
            raise UsageError(f"the state's feature normaliser has other constants: {', '.join(other)}; start a new "
                             f"state")
        rows = np.array([[np.nan if v is None else float(v) for v in row] for row in saved["rows"]],
                        dtype=np.float64).reshape(-1, nfeat)
        if len(rows) != min(bars, self.kept) or np.isinf(rows).any():
            raise ValueError(f"its feature normaliser holds {len(rows)} rows; {min(bars, self.kept)} "
                             f"expected after {bars} bars")
        defined = ~np.isnan(rows)
        if (np.logical_or.accumulate(defined, axis=0) & ~defined).any():
            raise ValueError("its feature normaliser holds a NaN after a column's first value")
        self.rows.extend(rows)
        if len(rows):
            self.z = stacked_zscores(rows, self.windows, last=1)[-1]


class EmaWindow:
    """The EMAs of a stream's log close, one per span (an ``EmaLevels`` of one series: levels [1, E]
    float64; none before the first bar), and ``z`` [E] float32, the last bar's deviations (0 before
    bar ``W``)."""

    def __init__(self, spans: tuple[int, ...], window: int) -> None:
        self.spans, self.W = tuple(spans), window
        self.reset()

    def reset(self) -> None:
        self._levels: EmaLevels | None = None
        self.z = np.zeros(len(self.spans), np.float32)

    def push(self, open_: float, close: float, closes: list[float], bars: int) -> None:
        """One bar (``bars``: bars consumed, this one included; ``closes``: the last ``W`` closes
        before it): the EMAs start at the stream's first open and take every close, as
        ``envs.ema_deviation.ema_deviations`` on a file from its first bar; from bar ``W`` on,
        ``z`` by ``EmaLevels.z`` with the RMS ``rolling_rms`` gives that bar on the whole file."""
        if not self.spans:
            return
        if self._levels is None:
            self._levels = EmaLevels(self.spans, np.log(np.array([open_], dtype=np.float64)))
        log_close = np.log(np.array([close], dtype=np.float64))
        self._levels.push(log_close)
        if bars > self.W:
            rms = rolling_rms(np.array([*closes[-self.W:], close], dtype=np.float64), self.W)[-1:]
            self.z = self._levels.z(log_close, rms)[0]

    def state(self) -> dict[str, Any]:
        """The spans, the clip and the levels [E] (None before the first bar) as JSON data (``z`` is
        not kept: the next bar computes it anew)."""
        levels = None if self._levels is None else self._levels.level[0].tolist()
        return {"spans": list(self.spans), "clip": EMA_CLIP, "levels": levels}

    def restore(self, saved: Any, bars: int) -> None:
        """The entries of ``state()`` after ``bars`` bars; ValueError unless they fit these spans
        (UsageError for another clip)."""
        if not self.spans and saved is None:
            return  # a state of a policy without spans may lack the entry
        if not isinstance(saved, dict):
            raise ValueError("no 'ema' entry: the policy reads the EMA deviations of --ema-spans "
                             f"{','.join(map(str, self.spans))}, and the state holds no EMAs")
        if saved.get("spans") != list(self.spans):
            raise ValueError(f"its EMA spans {saved.get('spans')} are not the policy's {list(self.spans)}")
        if not self.spans:
            return
        if saved.get("clip") != EMA_CLIP:
            raise UsageError(f"the state's EMAs have another clip: {saved.get('clip')!r} (now {EMA_CLIP!r}); start "
                             f"a new state")
        levels = saved.get("levels")
        if (levels is None) != (bars == 0):
            raise ValueError(f"its EMA levels are {'missing' if levels is None else 'given'} after {bars} bars")
        if levels is not None:
            level = np.asarray(levels, dtype=np.float64).reshape(1, -1)
            if level.shape != (1, len(self.spans)) or not np.isfinite(level).all():
                raise ValueError(f"its EMA levels {levels} are not {len(self.spans)} finite numbers, one per "
                                 f"span of {list(self.spans)}")
            self._levels = EmaLevels(self.spans, level[:, 0])
            self._levels.level = level
