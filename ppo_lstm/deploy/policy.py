"""``TradingPolicy``: a trained policy fed one bar at a time, taking the backtest's decisions, with a state to save.

    policy = TradingPolicy.load("checkpoints/best.pt")              # or TradingPolicy.from_onnx("policy.onnx")
    decision = policy.warm_up("prices.csv", start="2024-01-02")    # past bars; decides from 2024-01-02 on
    decision = policy.update(time, open_, high, low, close, volume, features={"vol_z": 0.4})  # each new bar
    decision.target_position                                       # signed lots to hold during the next bar

It plays what ``ppo_lstm.evaluation.backtest.backtest_history`` plays for one continuous episode
(timing, start rule, lots and costs: docs/deploy.md), building each observation with the env's
own code (``windows.py``: returns, feature z-scores, EMA deviations; ``envs.observation.Observer``;
``book.py``: the paper account), so a stream fed a file gives its backtest's observations bit for
bit. ``state_dict``/``save_state`` write the whole stream as plain, sealed JSON (``state.py``) and
``load_state`` resumes it. This module imports no torch: the ONNX route runs without it.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from envs.config import EnvConfig
from envs.data.market_data import MarketData
from envs.ema_deviation import short_history
from envs.observation import Observer

from ..errors import UsageError, one_line
from .bars import (FeatureValues, Source, as_market_data, bar_time_ns, bar_values, check_after, feature_row,
                   features_of, parse_start, with_costs)
from .book import PaperBook
from .decision import Decision
from .readouts import StreamReadouts
from .spec import PolicySpec, StepFn
from .state import (STATE_FORMAT, STATE_VERSION, BarChain, bar_records, chain_digest, check_owner, check_seal,
                    check_state, policy_entry, read_state_file, seal, write_state_file)
from .times import shown
from .windows import EmaWindow, FeatureWindow, ReturnWindow, feature_constants

if TYPE_CHECKING:
    import torch

    from ..algo.agent import RecurrentActorCritic

__all__ = [  # the names importable from here: the class, and those its callers import from this module
    "TradingPolicy", "Decision", "PolicySpec", "StepFn", "TorchStep", "checkpoint_fingerprint", "Source",
    "FeatureValues", "as_market_data", "parse_start", "with_costs", "bar_time_ns", "bar_records", "chain_digest",
    "check_owner", "feature_constants", "STATE_FORMAT", "STATE_VERSION",
]
_NS = np.dtype("datetime64[ns]")


def __getattr__(name: str) -> Any:
    """``TorchStep`` and ``checkpoint_fingerprint`` (``torch_step.py``), imported with torch on first use:
    this module imports no torch, so the ONNX route runs without it."""
    if name in ("TorchStep", "checkpoint_fingerprint"):
        from . import torch_step

        return getattr(torch_step, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ShortHistoryWarning(UserWarning):
    """A warm-up history too short for the policy's EMAs to read as a backtest on the whole file does."""


class TradingPolicy(StreamReadouts):
    """A trained policy, fed one bar at a time, that keeps its LSTM state, normalisers and book.

    ``update(bar t)``: the decision after bar ``t`` closes, lots for bar ``t+1`` (docs/deploy.md);
    None while the stream is still warming up (no bar at or after ``start`` yet, fewer than
    ``window + 1`` bars in all, or a feature column without a value).
    """

    def __init__(self, spec: PolicySpec, step: StepFn, env: Optional[EnvConfig] = None) -> None:
        """``env``: the settings to trade with (default ``spec.env``; only the costs may differ)."""
        self.spec, self._step = spec, step
        self.env = spec.env if env is None else env
        self.env.validate()
        spec.check_env(self.env)
        L = self.env.episode_length
        # one env whose time feature is clipped at the training length L, as the backtest's
        self._observer = Observer(1, replace(self.env, episode_length=L + 1), time_scale=L)
        self._t0 = np.zeros(1, np.int64)
        self._book = PaperBook(self.env)
        self._returns = ReturnWindow(self.env.window)
        self._features = FeatureWindow(spec.features, spec.env.feature_window)
        self._emas = EmaWindow(spec.ema_spans, self.env.window)
        self.reset()

    # ------------------------------------------------------------------ construction

    @classmethod
    def load(cls, checkpoint: str | os.PathLike, device: torch.device | str = "cpu",
             fee_bps: Optional[float] = None, slippage_bps: Optional[float] = None) -> "TradingPolicy":
        """The policy of a checkpoint file or directory (as ``evaluate-ppo-lstm --checkpoint``).

        ``fee_bps``/``slippage_bps`` override the checkpoint's costs (the book and so the
        observation's PnL feature use them). UsageError (one line) for an unusable file. torch is
        imported here, on first use, not by this module.
        """
        from .torch_step import checkpoint_step

        spec, step = checkpoint_step(checkpoint, device)
        return cls(spec, step, with_costs(spec.env, fee_bps, slippage_bps))

    @classmethod
    def from_onnx(cls, model: str | os.PathLike, fee_bps: Optional[float] = None,
                  slippage_bps: Optional[float] = None) -> "TradingPolicy":
        """The policy of an ONNX file written by ``export-ppo-lstm`` (run with onnxruntime)."""
        from .onnx_model import OnnxStep

        step = OnnxStep(model)
        return cls(step.spec, step, with_costs(step.spec.env, fee_bps, slippage_bps))

    @classmethod
    def from_agent(cls, agent: RecurrentActorCritic, env: EnvConfig, device: torch.device | str = "cpu",
                   fingerprint: str = "") -> "TradingPolicy":
        """An agent in memory with its training env settings."""
        from .torch_step import TorchStep

        spec = PolicySpec(env=env, lstm_size=agent.lstm_size, fingerprint=fingerprint, source="agent",
                          features=env.feature_names)
        return cls(spec, TorchStep(agent, device))

    # ------------------------------------------------------------------ the stream

    def reset(self) -> None:
        """Forget every bar: a fresh stream (no start, no bars, no position)."""
        self._chain = BarChain()
        self._returns.reset()
        self._features.reset()
        self._emas.reset()
        self._book.reset()
        self._h = self._c = np.zeros((1, self.spec.lstm_size), np.float32)
        self._decision: Optional[Decision] = None
        self._opened_ns: Optional[int] = None
        self.warm_up_warning: Optional[str] = None  # set by warm_up

    def begin(self, start: Optional[str] = None) -> None:
        """Set ``start`` (a date, as ``--start``) before the first bar; None: decide from the first bar on."""
        if self._chain.bars:
            raise UsageError(f"start is set before the first bar; this stream has consumed {self._chain.bars} bars "
                             f"(call reset() first)")
        self._chain.start_ns = None if start is None else int(parse_start(start).view(np.int64))

    def warm_up(self, source: Source, start: Optional[str] = None, date_format: Optional[str] = None,
                warn: bool = True) -> Optional[Decision]:
        """Start a fresh stream on past bars: a ``MarketData``, a DataFrame or a data file.

        Returns the decision for the bar after the last one (None: no bar at or after
        ``start``, fewer than ``window + 1`` bars in all, or a feature column not defined
        yet). Resets the stream first. A history too short for the EMAs to forget their start
        is warned of (:class:`ShortHistoryWarning`, unless ``warn`` is False; its text stays in
        :attr:`warm_up_warning` either way)."""
        data = as_market_data(source, date_format, self.spec.features)
        self.reset()
        self.begin(start)
        decision = self.feed(data)
        self.warm_up_warning = short_history(self.spec.ema_spans, len(data))
        if self.warm_up_warning is not None and warn:
            warnings.warn(self.warm_up_warning, ShortHistoryWarning, stacklevel=2)
        return decision

    def feed(self, data: MarketData, first: int = 0) -> Optional[Decision]:
        """Consume ``data``'s bars ``first..`` in order (bars the loader has validated; with
        feature columns, ``data`` must carry the policy's: ``load_ohlcv(..., features=...)``)."""
        stamps = np.asarray(data.timestamps).astype(_NS).view(np.int64)[first:]
        check_after(data, stamps, first, self._chain.last_ns)
        columns = [np.asarray(a, dtype=np.float64)[first:] for a in (data.open, data.high, data.low, data.close,
                                                                      data.volume)]
        raw = features_of(data, self.spec.features, self.env.features)
        raw = None if raw is None else raw[first:]
        z = self._features.normalise(raw, data.source) if raw is not None else None
        records = bar_records(stamps, *columns, raw)
        for i, (t, o, c) in enumerate(zip(stamps.tolist(), columns[0].tolist(), columns[3].tolist())):
            if raw is not None:
                self._features.push(raw[i], z[i])
            self._consume(records[i], t, o, c)
        return self._decision

    def update(self, time: Any, open: float, high: float, low: float, close: float,  # noqa: A002 - OHLCV names
               volume: float = 0.0, features: Optional[FeatureValues] = None) -> Optional[Decision]:
        """Consume one new bar (after it closed); returns the decision for the next bar.

        ``time``: a ``numpy.datetime64``, a ``datetime`` or ISO 8601 text (read without pandas), or
        anything else ``pandas.Timestamp`` reads (pandas imported then); time zones become naive UTC; after
        the last bar's; prices finite and > 0, volume finite and >= 0. ``features``: with a
        policy trained with ``--features``, the bar's raw value of each feature column, by
        name (matched case-insensitively, as the loader does; a dict, a ``pandas.Series`` or
        any mapping): finite, or None/NaN while that column has had no value yet (its
        warm-up). UsageError otherwise.
        """
        t, values = bar_values(time, self._chain.last_ns, open, high, low, close, volume)
        raw = feature_row(features, self.spec.features, shown(t))
        if raw is not None:
            self._features.add(raw, f"bar at {shown(t)}")
        self._consume(bar_records(np.array([t]), *([v] for v in values), raw)[0], t, values[0], values[3])
        return self._decision

    def fill(self, price: float, lots: int) -> None:
        """Report the real fill of the pending decision: ``lots`` signed lots held from the next
        bar's open on, bought or sold at ``price`` (slippage included: none is added; the fee
        is charged). Call it after a decision and before the next bar; the book, and so the
        next observation's PnL and time features, use it instead of the assumed fill."""
        self._book.set_fill(price, lots, self.spec.positions)

    # ------------------------------------------------------------------ one bar

    def _consume(self, record: np.ndarray, t: int, open_: float, close: float) -> None:
        self._chain.add(record, t)
        book = self._book
        if book.opened:
            book.book(open_, close)
        self._emas.push(open_, close, self._returns.closes, self._chain.bars)
        self._returns.push(close, self._chain.bars)
        if not book.opened and self._ready():
            book.open(close)
            self._opened_ns = t
            self._h = self._c = np.zeros((1, self.spec.lstm_size), np.float32)
        if book.opened:
            self._decide(t)

    def _ready(self) -> bool:
        """Whether the account opens at the bar just consumed (at or after start, past window, features defined)."""
        chain = self._chain
        return chain.since_start >= 1 and chain.bars > self.env.window and self._features.defined()

    def _decide(self, t: int) -> None:
        W = self.env.window
        self._observer.z[0, :W] = self._returns.values
        F = self.spec.env.num_feature_entries  # the columns' z-scores over each window
        if F:
            self._observer.feat[0, 0, :F] = self._features.z
        if self.spec.ema_spans:
            self._observer.feat[0, 0, F:] = self._emas.z
        book = self._book
        obs = self._observer.observe(book.ledger, self._t0, 0)  # [1, D]
        logits, value, self._h, self._c = self._step(obs, self._h, self._c)
        action = book.decide(logits)
        positions = self.spec.positions
        self._decision = Decision(
            time=np.datetime64(t, "ns"), bar=self._chain.bars - 1, target_position=positions[action],
            position=self.position, positions=positions, logits=tuple(float(v) for v in logits),
            value=float(value), equity=float(book.ledger.equity[0]), bust=book.bust, observation=obs[0].copy())

    # ------------------------------------------------------------------ state

    def state_dict(self, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """The stream's whole state as sealed JSON data (``state.py``: the policy, windows, LSTM, book, bar chain).
        ``extra``: entries of a caller's own (keys the state does not use), kept beside it under the seal."""
        return seal(self.state_body(extra))

    def state_body(self, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """``state_dict(extra)`` without its seal (``ppo_lstm.deploy.state.sealed_file`` seals it as it
        writes it out)."""
        chain, book = self._chain, self._book
        return {
            **(extra or {}),
            "format": STATE_FORMAT, "version": STATE_VERSION,
            "policy": policy_entry(self.spec, self.env), **chain.state(), **self._returns.state(),
            "opened": book.opened, "ledger": book.ledger_state(),
            "features": self._features.state(), "ema": self._emas.state(),
            "lstm": {"h": self._h[0].tolist(), "c": self._c[0].tolist()},
            "action": int(book.action[0]), "fill": None if book.fill is None else list(book.fill),
            "bust": book.bust, "decision": None if self._decision is None else self._decision._state(),
            "opened_ns": self._opened_ns,
        }

    def load_state_dict(self, state: dict[str, Any]) -> int:
        """Restore ``state_dict()`` output; returns its format version (1: unsealed, read as it is).
        UsageError (one line) for a state of another policy, backend, costs, feature set or EMA spans, one
        that is not a state of this format, or one edited after it was written (its seal)."""
        version = check_state(state, self.spec, self.env)
        try:
            self._restore(state)
            check_seal(state, version)
            return version
        except UsageError:
            self.reset()
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as err:
            self.reset()
            raise UsageError(f"not a valid policy state ({one_line(err)})") from None

    def _restore(self, s: dict[str, Any]) -> None:
        W, H = self.env.window, self.spec.lstm_size
        self.reset()
        chain = self._chain
        chain.restore(s)
        self._returns.restore(s["closes"], s["window"])
        h = np.asarray(s["lstm"]["h"], dtype=np.float32)[None]
        c = np.asarray(s["lstm"]["c"], dtype=np.float32)[None]
        if not (chain.consistent() and self._returns.fits(chain.bars) and h.shape == c.shape == (1, H)):
            raise ValueError("its counts, closes, window or LSTM state do not fit this policy")
        self._h, self._c = h, c
        self._features.restore(s.get("features"), chain.bars)
        self._emas.restore(s.get("ema"), chain.bars)
        opened = bool(s["opened"])
        if opened and not (chain.since_start >= 1 and chain.bars > W):
            raise ValueError("'opened' does not match the bars consumed")
        if not opened and self._ready():
            raise UsageError("it waits for a first decision this version takes at a bar it already consumed (a "
                             "state of an older version, whose first decision came window bars after --start); "
                             "start a new --state file")
        if opened:
            self._book.restore(s)
            self._opened_ns = None if s.get("opened_ns") is None else int(s["opened_ns"])
            self._decision = Decision._from_state(s["decision"], self.spec.positions, self.env.obs_dim)

    def save_state(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to ``path`` as JSON, atomically (a temp file renamed over it)."""
        write_state_file(path, self.state_dict())

    def load_state(self, path: str | os.PathLike) -> int:
        """Restore a state file written by :meth:`save_state` (JSON: nothing in it is executed);
        returns its format version."""
        state = read_state_file(path)
        try:
            return self.load_state_dict(state)
        except UsageError as err:
            raise UsageError(f"{Path(path)}: {err}") from None

    def verify_history(self, data: MarketData) -> None:
        """UsageError unless ``data``'s first ``bars`` bars are exactly the bars this stream consumed."""
        self._chain.verify(data, self.spec.features, self.env.features)
