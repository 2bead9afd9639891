"""Historical market source: an episode is a random start offset into a data file (or
into one of several files, each an instrument).

Nothing is copied per episode: the file's normalised returns and features are computed once
per file and setting (``envs.markets.file_columns``); a reset copies each env's slice of them
into ``z`` (one raw item per env) and a step gathers the N fills and marks from the
shared price arrays. Start offsets come from per-env pools of uniforms.
"""
from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs.config import EnvConfig
from envs.markets.base import Market, Rows
from envs.markets.file_columns import file_columns
from envs.markets.variates import VariatePool

if TYPE_CHECKING:
    from envs.data import MarketData

_START_EPISODES = 64  # episode starts per pool refill


class HistoricalMarket(Market):
    """N envs on windows of one or more files' bars (each file one instrument).

    The instruments' bars lie end to end in shared arrays (instrument k from ``base[k]``);
    ``start`` [N] is each env's first bar in them, ``instrument`` [N] its instrument.
    An episode draws one uniform: a start offset taken uniformly from the union of every
    instrument's possible starts, so an instrument is drawn in proportion to how many
    episode windows it has (a file twice as long trains twice as often), and every
    window of every file is equally likely. With one file this is the plain uniform start.
    """

    def __init__(self, num_envs: int, config: EnvConfig, z: np.ndarray, data: MarketData | Sequence[MarketData],
                 span: tuple[int, int] | Sequence[tuple[int, int]] | None = None,
                 feat: np.ndarray | None = None) -> None:
        """``span = (lo, hi)``: episodes lie within the file's bars ``lo..hi-1`` (default: all);
        with several files, one span per file (or None).

        The normalised returns are those of the file's bars ``0..hi-1``: causal, so the
        bars before ``lo`` warm up the RMS of the first window exactly as a training
        episode starting at ``lo`` would see it, and nothing after ``hi - 1`` is read.
        With ``--features``, ``data`` must carry the config's feature columns; their
        normalised values (``envs.data.features``) go into ``feat`` [N, L+1, F] at each reset,
        and no episode's first decision comes before the first bar where every feature
        is defined. With ``--ema-spans``, the EMA deviations of the file's bars ``0..hi-1``
        (``envs.ema_deviation``, the EMAs starting at the file's first open) follow them in ``feat``.
        """
        super().__init__(num_envs, config, z)
        files = [data] if not isinstance(data, (list, tuple)) else list(data)
        if not files:
            raise ValueError("no data files given")
        if span is None:
            spans: list = [None] * len(files)
        elif len(files) == 1 and not isinstance(span[0], (list, tuple)):
            spans = [span]
        else:
            spans = list(span)
        if len(spans) != len(files):
            raise ValueError(f"got {len(spans)} spans for {len(files)} data files")
        names, ema_spans = config.feature_names, config.spans
        self._nfeat = config.num_feature_entries + len(ema_spans)  # the columns' z-scores, then the EMA deviations
        F, decisions = self._nfeat, self.bars - self.W  # L+1 decision bars per episode
        opens, closes, zs, fs, self.base, los, tops = [], [], [], [], [], [], []
        base = 0
        for one, sp in zip(files, spans):
            lo, hi, top = self._window_range(one, sp, names)
            o = np.ascontiguousarray(one.open, dtype=np.float64)
            c = np.ascontiguousarray(one.close, dtype=np.float64)
            # bar b's normalised return at b-1 (zeros past hi-1), and its features; once per file and setting
            zdata, fz = file_columns(one, hi, self.W, tuple(names), config.feature_windows, tuple(ema_spans))
            opens.append(o), closes.append(c), zs.append(zdata)
            if F:
                fs.append(fz)
            self.base.append(base)
            los.append(base + lo)
            tops.append(top)
            base += len(c)
        one_file = len(files) == 1
        self.data_open = opens[0] if one_file else np.concatenate(opens)
        self.data_close = closes[0] if one_file else np.concatenate(closes)
        self._los = np.asarray(los, np.int64)  # first possible start of each instrument
        self._tops = np.asarray(tops, np.int64)  # how many starts each has
        self._cum = np.concatenate(([0], np.cumsum(self._tops)))  # [K+1]
        self._lo, self._top = int(self._los[0]), int(self._cum[-1])  # one file: its lo and start count
        self._fingerprint = {"bars": base, "close_crc32": zlib.crc32(self.data_close.tobytes())}
        if not one_file:
            self._fingerprint["instruments"] = len(files)
        zall = zs[0] if one_file else np.concatenate(zs)
        # row s: the normalised returns of an episode starting at bar s, as one raw item
        self._ep_item = np.dtype(f"V{4 * (self.bars - 1)}")
        self._zepisodes = sliding_window_view(zall, self.bars - 1).view(self._ep_item)[:, 0]
        if F:
            assert feat is not None
            self._fdata = (fs[0] if one_file else np.concatenate(fs)).reshape(-1)  # bar b at b*F..
            self._feat_item = np.dtype(f"V{4 * F * decisions}")
            # row b: the features of the L+1 decision bars from bar b on, as one raw item
            self._fepisodes = sliding_window_view(self._fdata, F * decisions)[::F].view(self._feat_item)[:, 0]
            self._feat_rows = feat.reshape(num_envs, -1).view(self._feat_item)[:, 0]
            if names:
                self._fingerprint["features"] = ",".join(n.lower() for n in names)
        self.start = np.zeros(num_envs, np.int64)
        self.instrument = np.zeros(num_envs, np.int64)
        self._starts = VariatePool(num_envs, _START_EPISODES, normal=False)  # one uniform per episode
        self._bar = np.zeros(num_envs, np.int64)  # data index scratch
        self._o, self._c = np.zeros(num_envs), np.ones(num_envs)  # this step's opens and closes

    def _window_range(self, data: MarketData, span: tuple[int, int] | None,
                      names: tuple[str, ...]) -> tuple[int, int, int]:
        """(lo, hi, number of episode starts) of one file: ValueError when it cannot hold an episode."""
        have = len(data.close)
        lo, hi = (0, have) if span is None else (int(span[0]), int(span[1]))
        if not 0 <= lo < hi <= have:
            raise ValueError(f"span {span} is not a range of bars within 0..{have}")
        if hi - lo < self.bars:
            raise ValueError(
                f"data has {hi - lo} bars but one episode needs window + episode_length + 1 = {self.bars}; "
                f"use a longer file or lower --window/--episode-length"
            )
        if not (np.all(np.asarray(data.open) > 0) and np.all(np.asarray(data.close) > 0)):
            raise ValueError("data open/close prices must all be > 0 (and not NaN)")
        if names:
            have_names = tuple(n.lower() for n in data.feature_names)
            if have_names != tuple(n.lower() for n in names) or data.features is None:
                raise ValueError(f"{data.source}: the env observes features {', '.join(names)} but the data was "
                                 f"loaded with {', '.join(data.feature_names) or 'none'}; load it with "
                                 f"load_ohlcv(..., features={names!r})")
            defined = data.first_defined
            if defined - self.W > lo:
                lo = defined - self.W  # the first decision (bar start + W) reads defined features
                if hi - lo < self.bars:
                    raise ValueError(
                        f"{data.source}: every feature is defined from bar {defined + 1} on, which leaves "
                        f"{max(0, hi - defined)} bars for decisions; one episode needs episode_length + 1 = "
                        f"{self.bars - self.W}; use a longer file or lower --episode-length")
        return lo, hi, hi - lo - self.bars + 1

    def _episode_bars(self, prices: np.ndarray) -> np.ndarray:
        """[N, W+L+1] of each env's episode from a data price array (a gathered copy)."""
        return prices[self.start[:, None] + np.arange(self.bars)]

    @property
    def open(self) -> np.ndarray:
        """Opens [N, W+L+1] (a gathered copy)."""
        return self._episode_bars(self.data_open)

    @property
    def close(self) -> np.ndarray:
        """Closes [N, W+L+1] (a gathered copy)."""
        return self._episode_bars(self.data_close)

    def forget(self, i: int) -> None:
        self._starts.clear(i)

    def begin(self, rows: np.ndarray, sel: Rows, rngs: list) -> np.ndarray:
        start = np.multiply(self._starts.take(rows, 1, rngs)[:, 0], self._top).astype(np.int64)
        np.minimum(start, self._top - 1, out=start)  # u * top may round up to top
        if len(self._tops) > 1:  # the g-th start of the union: instrument k's (g - cum[k])-th
            k = np.searchsorted(self._cum, start, side="right") - 1
            start += self._los[k] - self._cum[k]
            self.instrument[sel] = k
        elif self._lo:
            start += self._lo
        self.start[sel] = start
        self._gather_returns(sel, start)
        return self.data_close[start + self.W]

    def _gather_returns(self, sel: Rows, start: np.ndarray) -> None:
        """``z[sel]`` from the file's normalised returns: one raw ``4(W+L)``-byte item per env."""
        self.z.view(self._ep_item)[:, 0][sel] = self._zepisodes[start]
        if self._nfeat:
            self._feat_rows[sel] = self._fepisodes[start + self.W]

    def next_bar(self, t0: int, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bar = self._bar
        if t0 >= 0:
            np.add(self.start, t0 + self.W + 1, out=bar)
        else:
            np.add(self.start, t, out=bar)
            bar += self.W + 1
        self.data_open.take(bar, out=self._o, mode="clip")  # bars are always in range; "clip" skips a buffer
        self.data_close.take(bar, out=self._c, mode="clip")
        return self._o, self._c

    def get_state(self) -> dict[str, Any]:
        """``start`` offsets and the data's fingerprint (``open``/``close`` are kept for readers)."""
        return {"start": self.start.copy(), "data": dict(self._fingerprint),
                "pools": {"uniform": self._starts.get_state()}}

    def set_state(self, state: dict[str, Any], open_: np.ndarray, close: np.ndarray) -> None:
        """Refuses (ValueError) a state saved on other data: another length or close checksum,
        or price windows that are not this data's bars at the saved offsets."""
        saved = state.get("data")
        if saved is not None and dict(saved) != self._fingerprint:
            raise ValueError(
                f"state was saved on different data ({saved.get('bars')} bars, close crc32 "
                f"{saved.get('close_crc32')}); this env has {self._fingerprint['bars']} bars, "
                f"close crc32 {self._fingerprint['close_crc32']}"
            )
        if "start" in state:
            start = np.asarray(state["start"]).astype(np.int64)
            k = np.searchsorted(self._los, start, side="right") - 1
            if start.shape != (self.n,) or (k < 0).any() or (start - self._los[k] >= self._tops[k]).any():
                ranges = ", ".join(f"{lo}..{lo + top - 1}" for lo, top in zip(self._los, self._tops))
                raise ValueError(f"state['start'] must be {self.n} offsets in {ranges}")
            self.instrument[...] = k
        else:
            start = self._locate(open_, close)
        idx = start[:, None] + np.arange(self.bars)
        if not (np.array_equal(self.data_open[idx], open_) and np.array_equal(self.data_close[idx], close)):
            raise ValueError("state's price windows differ from this env's data at its offsets: saved on other data")
        self.start[...] = start
        self._gather_returns(slice(None), start)
        self._starts.set_state((state.get("pools") or {}).get("uniform"))

    def _locate(self, open_: np.ndarray, close: np.ndarray) -> np.ndarray:
        """Start offsets [N] of states saved before they were stored: where each env's bars are."""
        start = np.zeros(self.n, np.int64)
        for i in range(self.n):
            at = self._lo + np.flatnonzero(self.data_close[self._lo : self._lo + self._top] == close[i, 0])
            hits = [s for s in at.tolist() if np.array_equal(self.data_close[s : s + self.bars], close[i])
                    and np.array_equal(self.data_open[s : s + self.bars], open_[i])]
            if not hits:
                raise ValueError("state's price windows are not in this env's data: it was saved on other data")
            start[i] = hits[0]
        return start
