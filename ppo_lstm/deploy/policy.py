"""A trained policy fed one bar at a time: the backtest's decisions, bar by bar, with a state to save.

``TradingPolicy`` plays what ``ppo_lstm.evaluation.backtest.backtest_history`` plays for one
continuous episode, but one bar at a time, so a live user gets each decision as soon
as a bar closes, and can stop and resume without replaying history::

    policy = TradingPolicy.load("checkpoints/best.pt")
    decision = policy.warm_up("prices.csv", start="2024-01-02")  # past bars
    decision = policy.update(time, open_, high, low, close, volume)  # each new bar
    decision.target_position                                        # lots for the next bar

A policy trained with ``--features`` also reads the bar's feature columns: ``warm_up``
loads them from the file or DataFrame (by name, as training did), and ``update`` takes
them by name: ``policy.update(time, o, h, l, c, v, features={"vol_z": 0.4, "rsi": 61.0})``.

Timing (the backtest's): ``update(bar t)`` returns the decision taken after bar ``t``
closes: ``target_position`` signed lots to hold during bar ``t+1``, traded at its open.
When bar ``t+1`` comes in, the policy books that trade at bar ``t+1``'s open with the
configured slippage and fee (or at the price ``fill`` reported), marks the position at
its close, and decides again.

Start: the bars before ``start`` (all bars if None) only warm up the normalised returns,
as in ``evaluate-ppo-lstm --start``. With ``lo`` the first bar at or after ``start``, the
first decision is taken after bar ``lo + window`` closes (its observation's returns are
those of bars ``lo+1..lo+window``): there the LSTM starts from zero and the account opens
flat with ``initial_cash``, one lot being ``initial_cash / (K * close)`` units of that
bar's close. The time feature's scale is the training episode length, clipped at 1
(``envs.observation``). An account whose equity reaches 0 stays flat (the backtest's rule).
With feature columns, the first decision is also at or after the first bar where every
feature is defined (a column's leading NaN rows are its warm-up), as in
``backtest_history``: then the account opens at that bar.

The observations come from the env's own code: ``envs.observation.normalised_returns``
on the last ``window + 1`` closes (the same value, bit for bit, as on the whole file:
``tests/test_policy.py``), the env's ``Observer`` and ``Ledger``, and the feature columns'
rolling z-scores by ``envs.features.feature_zscores`` on the last ``FEATURE_WINDOW`` raw rows
(the rule of ``FeatureNormaliser``: bit for bit the values of the whole file). The network
step is the agent's own ``step`` (``TorchStep``) or the exported ONNX step (``ppo_lstm.deploy.onnx_model``).

State: ``state_dict()`` is plain JSON data (numbers, strings, lists; floats written
with ``repr`` round-trip exactly); ``save_state``/``load_state`` write and read it as a
JSON file (atomically). It carries a fingerprint of the policy (its weights and
settings), the costs, ``start``, the feature normaliser's constants and its last
``FEATURE_WINDOW`` raw rows (NaN written as null), and a SHA-256 chain of every bar
consumed (time, OHLCV and feature values), so a state is refused by another policy or
normaliser, and a file whose earlier bars differ is refused by ``verify_history``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import pandas as pd
import torch

from envs.config import EnvConfig
from envs.data import DataError, MarketData, _parse_date, load_ohlcv
from envs.features import FEATURE_CLIP, FEATURE_WINDOW, STD_FLOOR_ABS, STD_FLOOR_REL, feature_zscores
from envs.ledger import Ledger
from envs.observation import Observer, normalised_returns

from ..algo.agent import RecurrentActorCritic
from ..config import TrainConfig
from ..errors import UsageError, one_line

STATE_FORMAT = "ppo-lstm-trader policy state"
STATE_VERSION = 1
_NS = np.dtype("datetime64[ns]")

# (obs [1, D] float32, h [1, H], c [1, H]) -> (logits [A] float32, value, h' [1, H], c' [1, H])
StepFn = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, float, np.ndarray, np.ndarray]]
Source = Union[MarketData, pd.DataFrame, str, os.PathLike]
FeatureValues = Mapping[str, Optional[float]]


def feature_constants() -> dict[str, Any]:
    """The feature normaliser's constants, as this version applies them (``envs.features``)."""
    return {"window": FEATURE_WINDOW, "clip": FEATURE_CLIP, "std_floor_rel": STD_FLOOR_REL,
            "std_floor_abs": STD_FLOOR_ABS}


@dataclass(frozen=True)
class PolicySpec:
    """What a stream needs of a trained policy besides its weights.

    ``env``: the training env's settings (window, max position, costs, initial cash; its
    ``episode_length`` is the time feature's scale); ``fingerprint``: SHA-256 of the
    checkpoint's weights and settings (``checkpoint_fingerprint``); ``backend``:
    ``"checkpoint"`` or ``"onnx"``; ``features``: the data's feature columns the
    observation uses (``env.feature_names``: the training ``--features``, in order).
    """

    env: EnvConfig
    lstm_size: int
    fingerprint: str
    backend: str = "checkpoint"
    source: str = ""
    features: tuple[str, ...] = ()

    @property
    def positions(self) -> tuple[int, ...]:
        """Signed lots of each action index: ``-K..K`` (``0..K`` with no_short)."""
        offset = 0 if self.env.no_short else self.env.max_position
        return tuple(a - offset for a in range(self.env.num_actions))


def checkpoint_fingerprint(agent: RecurrentActorCritic, config: TrainConfig) -> str:
    """SHA-256 (hex) of the agent's weights and the checkpoint's network and env settings."""
    digest = hashlib.sha256()
    settings = {"env": asdict(config.env), "hidden_size": config.hidden_size, "lstm_size": config.lstm_size}
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name, tensor in sorted(agent.state_dict().items()):
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()


class TorchStep:
    """The agent's :meth:`RecurrentActorCritic.step` for one env: the call the backtest makes."""

    def __init__(self, agent: RecurrentActorCritic, device: torch.device | str = "cpu") -> None:
        self.agent, self.device = agent, torch.device(device)
        self.starts = torch.zeros(1, device=self.device)  # the state is zeroed by the caller, not here

    def __call__(self, obs: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, float, np.ndarray,
                                                                               np.ndarray]:
        dev = self.device
        with torch.inference_mode():
            state = (torch.from_numpy(h)[None].to(dev), torch.from_numpy(c)[None].to(dev))  # [1, 1, H]
            logits, value, (h2, c2) = self.agent.step(torch.from_numpy(obs).to(dev), state, self.starts)
            return logits[0].cpu().numpy(), float(value[0]), h2[0].cpu().numpy(), c2[0].cpu().numpy()


@dataclass(frozen=True, eq=False)
class Decision:
    """The decision taken after the bar of ``time`` closed, for the next bar.

    ``target_position``: signed lots to hold during the next bar (traded at its open);
    ``position``: lots held now, during the bar of ``time``; ``probabilities`` [A] and
    ``logits`` [A]: of the actions whose lots are ``positions``; ``value``: the critic's
    estimate (reward units); ``equity``: the paper account's equity at ``time``'s close;
    ``bust``: the account reached 0 and is kept flat; ``bar``: the bar's index in the
    stream (0 = the first bar consumed); ``observation`` [D] float32: the network's input.
    """

    time: pd.Timestamp
    bar: int
    target_position: int
    position: int
    positions: tuple[int, ...]
    logits: tuple[float, ...]
    value: float
    equity: float
    bust: bool
    observation: np.ndarray

    def __eq__(self, other: object) -> bool:
        """Every field equal (the observation element by element)."""
        if not isinstance(other, Decision):
            return NotImplemented
        mine, theirs = self._state(), other._state()
        return mine == theirs and self.positions == other.positions

    __hash__ = None  # type: ignore[assignment]

    @property
    def probabilities(self) -> tuple[float, ...]:
        """Softmax of the logits (float64)."""
        logits = np.asarray(self.logits, dtype=np.float64)
        e = np.exp(logits - logits.max())
        return tuple((e / e.sum()).tolist())

    @property
    def action(self) -> int:
        """Index of ``target_position`` in ``positions``."""
        return self.positions.index(self.target_position)

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready summary (without the observation)."""
        return {
            "time": self.time.isoformat(), "target_position": self.target_position, "position": self.position,
            "probabilities": {str(p): q for p, q in zip(self.positions, self.probabilities)},
            "value": self.value, "logits": list(self.logits), "equity": self.equity, "bust": self.bust,
        }

    def _state(self) -> dict[str, Any]:
        return {"time_ns": int(self.time.value), "bar": self.bar, "target_position": self.target_position,
                "position": self.position, "logits": list(self.logits), "value": self.value,
                "equity": self.equity, "bust": self.bust, "observation": self.observation.tolist()}

    @classmethod
    def _from_state(cls, s: dict[str, Any], positions: tuple[int, ...], dim: int) -> "Decision":
        obs = np.asarray(s["observation"], dtype=np.float32)
        logits = tuple(float(v) for v in s["logits"])
        if obs.shape != (dim,) or len(logits) != len(positions) or int(s["target_position"]) not in positions:
            raise ValueError("the last decision's observation, logits or target do not fit this policy")
        return cls(time=pd.Timestamp(int(s["time_ns"])), bar=int(s["bar"]), target_position=int(s["target_position"]),
                   position=int(s["position"]), positions=positions, logits=logits, value=float(s["value"]),
                   equity=float(s["equity"]), bust=bool(s["bust"]), observation=obs)


def bar_records(time_ns: np.ndarray, open_: np.ndarray, high: np.ndarray, low: np.ndarray, close: np.ndarray,
                volume: np.ndarray, features: Optional[np.ndarray] = None) -> np.ndarray:
    """[n, 6+F] int64: each bar's time (ns), the bits of its OHLCV (float64) and of its raw
    feature values ``features [n, F]`` (float64, every NaN as the one NaN): what the chain hashes."""
    F = 0 if features is None else features.shape[1]
    records = np.empty((len(time_ns), 6 + F), np.int64)
    records[:, 0] = time_ns
    prices = np.stack([np.asarray(a, dtype=np.float64) for a in (open_, high, low, close, volume)], axis=1)
    records[:, 1:6] = prices.view(np.int64)
    if F:
        values = np.asarray(features, dtype=np.float64)
        records[:, 6:] = np.where(np.isnan(values), np.nan, values).view(np.int64)
    return records


def chain_digest(digest: bytes, records: np.ndarray) -> bytes:
    """The bar chain after ``records`` [n, 6+F]: ``d <- sha256(d + record)`` for each bar in turn."""
    for row in records:
        digest = hashlib.sha256(digest + row.tobytes()).digest()
    return digest


def _time_ns(time: Any) -> int:
    """A bar's time as naive-UTC nanoseconds (time zones converted to UTC, as the loader does)."""
    try:
        stamp = pd.Timestamp(time)
    except (ValueError, TypeError, OverflowError) as err:
        raise UsageError(f"bar time {time!r} is not a time ({one_line(err)})") from None
    if stamp is pd.NaT or pd.isna(stamp):
        raise UsageError(f"bar time {time!r} is not a time")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    return int(stamp.as_unit("ns").value)


class TradingPolicy:
    """A trained policy, fed one bar at a time, that keeps its LSTM state, normalisers and book.

    See the module docstring for the timing. ``update`` returns None while the stream
    is still warming up (fewer than ``window + 1`` bars from ``start``).
    """

    def __init__(self, spec: PolicySpec, step: StepFn, env: Optional[EnvConfig] = None) -> None:
        """``env``: the settings to trade with (default ``spec.env``; only the costs may differ)."""
        self.spec, self._step = spec, step
        self.env = spec.env if env is None else env
        self.env.validate()
        if tuple(spec.features) != self.env.feature_names:
            raise UsageError(f"{spec.source}: the policy's feature columns {list(spec.features)} are not its env's "
                             f"{list(self.env.feature_names)}")
        self._nfeat = len(spec.features)
        W, L = self.env.window, self.env.episode_length
        self._flat = 0 if self.env.no_short else self.env.max_position  # action index of 0 lots
        # one env whose time feature is clipped at the training length L, as the backtest's
        self._observer = Observer(1, replace(self.env, episode_length=L + 1), time_scale=L)
        self._t0 = np.zeros(1, np.int64)
        self._ledger = Ledger(1, self.env)
        self.reset()
        assert len(self._window) == W

    # ------------------------------------------------------------------ construction

    @classmethod
    def load(cls, checkpoint: str | os.PathLike, device: torch.device | str = "cpu",
             fee_bps: Optional[float] = None, slippage_bps: Optional[float] = None) -> "TradingPolicy":
        """The policy of a checkpoint file or directory (as ``evaluate-ppo-lstm --checkpoint``).

        ``fee_bps``/``slippage_bps`` override the checkpoint's costs (the book and so the
        observation's PnL feature use them). UsageError (one line) for an unusable file.
        """
        from ..evaluation.cli import checkpoint_file, load_policy  # evaluate imports much; only the loader is needed

        path = checkpoint_file(Path(checkpoint))
        agent, config = load_policy(path, device)
        spec = PolicySpec(env=config.env, lstm_size=config.lstm_size,
                          fingerprint=checkpoint_fingerprint(agent, config), backend="checkpoint", source=str(path),
                          features=config.env.feature_names)
        return cls(spec, TorchStep(agent, device), with_costs(config.env, fee_bps, slippage_bps))

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
        spec = PolicySpec(env=env, lstm_size=agent.lstm_size, fingerprint=fingerprint, source="agent",
                          features=env.feature_names)
        return cls(spec, TorchStep(agent, device))

    # ------------------------------------------------------------------ the stream

    def reset(self) -> None:
        """Forget every bar: a fresh stream (no start, no bars, no position)."""
        W = self.env.window
        self._start_ns: Optional[int] = None
        self._bars = 0
        self._digest = b""
        self._last_ns: Optional[int] = None
        self._closes: list[float] = []  # the last W closes (W + 1 while a bar is consumed)
        self._window = np.zeros(W, np.float32)  # normalised returns of the last W bars
        # raw feature rows [F] float64 of the last FEATURE_WINDOW bars (NaN: not defined yet)
        self._feat_rows: deque[np.ndarray] = deque(maxlen=FEATURE_WINDOW)
        self._feat_z = np.zeros(self._nfeat, np.float32)  # the last bar's normalised features
        self._since_start = 0  # bars consumed at or after start
        self._opened = False
        self._h = self._c = np.zeros((1, self.spec.lstm_size), np.float32)
        self._action = np.full(1, self._flat, np.int64)  # the pending decision (action index)
        self._fill: Optional[tuple[float, int]] = None
        self._bust = False
        self._decision: Optional[Decision] = None

    def begin(self, start: Optional[str] = None) -> None:
        """Set ``start`` (a date, as ``--start``) before the first bar; None: decide from the first bar on."""
        if self._bars:
            raise UsageError(f"start is set before the first bar; this stream has consumed {self._bars} bars "
                             f"(call reset() first)")
        self._start_ns = None if start is None else int(parse_start(start).value)

    def warm_up(self, source: Source, start: Optional[str] = None, date_format: Optional[str] = None
                ) -> Optional[Decision]:
        """Start a fresh stream on past bars: a ``MarketData``, a DataFrame or a data file.

        Returns the decision for the bar after the last one (None: fewer than
        ``window + 1`` bars from ``start``). Resets the stream first.
        """
        data = as_market_data(source, date_format, self.spec.features)
        self.reset()
        self.begin(start)
        return self.feed(data)

    def feed(self, data: MarketData, first: int = 0) -> Optional[Decision]:
        """Consume ``data``'s bars ``first..`` in order (bars the loader has validated; with
        feature columns, ``data`` must carry the policy's: ``load_ohlcv(..., features=...)``)."""
        stamps = np.asarray(data.timestamps).astype(_NS).view(np.int64)[first:]
        if len(stamps) and self._last_ns is not None and int(stamps[0]) <= self._last_ns:
            raise UsageError(f"{data.source}: bar {first} ({pd.Timestamp(int(stamps[0]))}) is not after the last "
                             f"bar consumed ({pd.Timestamp(self._last_ns)})")
        columns = [np.asarray(a, dtype=np.float64)[first:] for a in (data.open, data.high, data.low, data.close,
                                                                      data.volume)]
        raw = self._features_of(data)
        raw = None if raw is None else raw[first:]
        z = self._normalise(raw, data.source) if raw is not None else None
        records = bar_records(stamps, *columns, raw)
        for i, (t, o, c) in enumerate(zip(stamps.tolist(), columns[0].tolist(), columns[3].tolist())):
            if raw is not None:
                self._feat_rows.append(raw[i].copy())
                self._feat_z = z[i]
            self._consume(records[i], t, o, c)
        return self._decision

    def update(self, time: Any, open: float, high: float, low: float, close: float,  # noqa: A002 - OHLCV names
               volume: float = 0.0, features: Optional[FeatureValues] = None) -> Optional[Decision]:
        """Consume one new bar (after it closed); returns the decision for the next bar.

        ``time``: anything ``pandas.Timestamp`` reads (time zones become naive UTC), after
        the last bar's; prices finite and > 0, volume finite and >= 0. ``features``: with a
        policy trained with ``--features``, the bar's raw value of each feature column, by
        name (matched case-insensitively, as the loader does; a dict, a ``pandas.Series`` or
        any mapping): finite, or None/NaN while that column has had no value yet (its
        warm-up). UsageError otherwise.
        """
        t = _time_ns(time)
        if self._last_ns is not None and t <= self._last_ns:
            raise UsageError(f"bar time {pd.Timestamp(t)} is not after the last bar's ({pd.Timestamp(self._last_ns)})")
        values = [float(v) for v in (open, high, low, close, volume)]
        if not all(math.isfinite(v) and v > 0 for v in values[:4]):
            raise UsageError(f"bar at {pd.Timestamp(t)}: open, high, low and close must be finite and > 0, got "
                             f"{values[:4]}")
        if not (math.isfinite(values[4]) and values[4] >= 0):
            raise UsageError(f"bar at {pd.Timestamp(t)}: volume must be finite and >= 0, got {values[4]}")
        raw = self._feature_row(features, pd.Timestamp(t))
        z = self._normalise(raw, f"bar at {pd.Timestamp(t)}") if raw is not None else None
        record = bar_records(np.array([t]), *([v] for v in values), raw)[0]
        if raw is not None:
            self._feat_rows.append(raw[0].copy())
            self._feat_z = z[0]
        self._consume(record, t, values[0], values[3])
        return self._decision

    # ------------------------------------------------------------------ feature columns

    def _features_of(self, data: MarketData) -> Optional[np.ndarray]:
        """The policy's feature columns of ``data`` [n, F] float64 in the policy's order (None
        without features); UsageError naming a column ``data`` was not loaded with."""
        if not self._nfeat:
            return None
        have = {str(name).lower(): j for j, name in enumerate(data.feature_names)}
        missing = [name for name in self.spec.features if name.lower() not in have]
        if missing or data.features is None:
            names = ", ".join(map(repr, missing or self.spec.features))
            raise UsageError(f"{data.source}: has no feature column {names}, which the policy reads (trained with --features {self.env.features}); load the "
                             f"data with those columns (load_ohlcv(..., features=...)), or pass a file or DataFrame")
        values = np.asarray(data.features, dtype=np.float64)
        if values.shape != (len(data), len(data.feature_names)):
            raise UsageError(f"{data.source}: its features have shape {values.shape}, expected "
                             f"({len(data)}, {len(data.feature_names)}): one row per bar, one column per name")
        return values[:, [have[name.lower()] for name in self.spec.features]]

    def _feature_row(self, features: Optional[FeatureValues], when: pd.Timestamp) -> Optional[np.ndarray]:
        """``update``'s ``features`` as one raw row [1, F] float64 in the policy's order."""
        names = self.spec.features
        if not names:
            if features:
                raise UsageError(f"bar at {when}: features {sorted(map(str, features.keys()))} given, but this "
                                 f"policy reads no feature columns (it was trained without --features)")
            return None
        if features is None:
            raise UsageError(f"bar at {when}: the policy reads feature columns {', '.join(names)}; pass them as "
                             f"update(..., features={{{', '.join(repr(n) + ': ...' for n in names)}}})")
        if not hasattr(features, "keys"):
            raise UsageError(f"bar at {when}: features must map each column name to its value (a dict), got "
                             f"{type(features).__name__}")
        given = {str(key).lower(): key for key in features.keys()}
        if len(given) != len(list(features.keys())):
            raise UsageError(f"bar at {when}: features name a column twice (names are matched case-insensitively)")
        wanted = {name.lower() for name in names}
        missing = [name for name in names if name.lower() not in given]
        unknown = [str(key) for low, key in given.items() if low not in wanted]
        if missing or unknown:
            what = [f"no value for {', '.join(map(repr, missing))}"] if missing else []
            what += [f"unknown column(s) {', '.join(map(repr, unknown))}"] if unknown else []
            raise UsageError(f"bar at {when}: features: {'; '.join(what)}; the policy reads {', '.join(names)}")
        row = np.empty((1, len(names)))
        for j, name in enumerate(names):
            value = features[given[name.lower()]]
            try:
                row[0, j] = np.nan if value is None else float(value)
            except (TypeError, ValueError):
                raise UsageError(f"bar at {when}: feature {name!r} must be a number, got {value!r}") from None
        return row

    def _normalise(self, raw: np.ndarray, where: str) -> np.ndarray:
        """The normalised features [n, F] float32 of new raw rows ``raw`` [n, F] after the rows
        kept: ``feature_zscores`` of them all (a row's value depends only on its window).
        UsageError for inf, or a NaN after a column's first value (the loader's rules)."""
        previous = list(self._feat_rows)
        defined = ~np.isnan(raw)
        if np.isinf(raw).any():
            raise UsageError(f"{where}: an infinite value in feature column "
                             f"{self.spec.features[int(np.argmax(np.isinf(raw).any(axis=0)))]!r}")
        seen = ~np.isnan(previous[-1]) if previous else np.zeros(raw.shape[1], bool)
        after_first = np.logical_or.accumulate(defined, axis=0) | seen  # [n, F]: the column has had a value
        gap = after_first & ~defined
        if gap.any():
            j = int(np.argmax(gap.any(axis=0)))
            raise UsageError(f"{where}: no value (NaN) for feature {self.spec.features[j]!r} after its first value; "
                             f"only a column's leading bars (its warm-up) may lack one")
        rows = np.concatenate([np.stack(previous), raw]) if previous else raw
        return feature_zscores(rows, FEATURE_WINDOW)[len(previous):]

    def fill(self, price: float, lots: int) -> None:
        """Report the real fill of the pending decision: ``lots`` signed lots held from the next
        bar's open on, bought or sold at ``price`` (slippage included: none is added; the fee
        is charged). Call it after a decision and before the next bar; the book, and so the
        next observation's PnL and time features, use it instead of the assumed fill."""
        if not self._opened:
            raise UsageError("fill() reports the fill of a decision; no decision has been taken yet")
        price = float(price)
        if not (math.isfinite(price) and price > 0):
            raise UsageError(f"fill price must be finite and > 0, got {price}")
        if int(lots) != lots or int(lots) not in self.spec.positions:
            raise UsageError(f"fill lots must be one of {list(self.spec.positions)}, got {lots}")
        self._fill = (price, int(lots))

    # ------------------------------------------------------------------ read-outs

    @property
    def decision(self) -> Optional[Decision]:
        """The latest decision (None while warming up)."""
        return self._decision

    @property
    def bars(self) -> int:
        """Bars consumed."""
        return self._bars

    @property
    def bars_from_start(self) -> int:
        """Bars consumed at or after ``start`` (decisions begin at ``window + 1``)."""
        return self._since_start

    @property
    def last_time(self) -> Optional[pd.Timestamp]:
        """Time of the last bar consumed."""
        return None if self._last_ns is None else pd.Timestamp(self._last_ns)

    @property
    def start(self) -> Optional[pd.Timestamp]:
        return None if self._start_ns is None else pd.Timestamp(self._start_ns)

    def undefined_features(self) -> list[str]:
        """The feature columns without a value at the last bar consumed (their warm-up): no
        decision is taken while there are any."""
        if not self._bars:
            return list(self.spec.features)
        return [name for name, z in zip(self.spec.features, self._feat_z.tolist()) if math.isnan(z)]

    @property
    def position(self) -> int:
        """Lots held now (0 before the first decision)."""
        return int(self._ledger.pos[0]) if self._opened else 0

    @property
    def equity(self) -> Optional[float]:
        """The paper account's equity at the last close (None before the first decision)."""
        return float(self._ledger.equity[0]) if self._opened else None

    # ------------------------------------------------------------------ one bar

    def _consume(self, record: np.ndarray, t: int, open_: float, close: float) -> None:
        self._digest = hashlib.sha256(self._digest + record.tobytes()).digest()
        self._bars += 1
        self._last_ns = t
        if self._opened:
            self._book(open_, close)
        self._push_close(close)
        if self._start_ns is None or t >= self._start_ns:
            self._since_start += 1
        if not self._opened and self._since_start > self.env.window and self._features_defined():
            self._ledger.open(slice(None), np.array([close]))
            self._h = self._c = np.zeros((1, self.spec.lstm_size), np.float32)
            self._opened = True
        if self._opened:
            self._decide(t)

    def _features_defined(self) -> bool:
        """Every feature defined at the last bar (always true without features)."""
        return not np.isnan(self._feat_z).any()

    def _push_close(self, close: float) -> None:
        """The normalised return of the new bar, by ``normalised_returns`` on the last W + 1 closes
        (at the stream's bar W: bars 1..W, which share the first full window's RMS)."""
        W, closes = self.env.window, self._closes
        closes.append(close)
        if self._bars == W + 1:
            self._window[:] = normalised_returns(np.array(closes), W)
        elif self._bars > W + 1:
            self._window[:-1] = self._window[1:]
            self._window[-1] = normalised_returns(np.array(closes), W)[-1]
        if len(closes) > W:
            del closes[0]

    def _book(self, open_: float, close: float) -> None:
        """The pending decision, filled at this bar's open (or as ``fill`` said), marked at its close."""
        ledger = self._ledger
        if self._fill is None:
            ledger.step(self._action, np.array([open_]), np.array([close]))
        else:
            price, lots = self._fill
            self._fill = None
            slip, ledger.slip = ledger.slip, 0.0  # the reported price already includes any slippage
            try:
                ledger.step(np.array([lots + self._flat]), np.array([price]), np.array([close]))
            finally:
                ledger.slip = slip
        self._bust |= bool(ledger.equity[0] <= 0.0)

    def _decide(self, t: int) -> None:
        W = self.env.window
        self._observer.z[0, :W] = self._window
        if self._nfeat:
            self._observer.feat[0, 0] = self._feat_z
        obs = self._observer.observe(self._ledger, self._t0, 0)  # [1, D]
        logits, value, self._h, self._c = self._step(obs, self._h, self._c)
        action = self._flat if self._bust else int(np.argmax(logits))
        self._action[0] = action
        positions = self.spec.positions
        self._decision = Decision(
            time=pd.Timestamp(t), bar=self._bars - 1, target_position=positions[action], position=self.position,
            positions=positions, logits=tuple(float(v) for v in logits), value=float(value),
            equity=float(self._ledger.equity[0]), bust=self._bust, observation=obs[0].copy())

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The stream's whole state as plain JSON data (see the module docstring)."""
        ledger = None
        if self._opened:
            ledger = {name: np.asarray(value).tolist() for name, value in self._ledger.get_state().items()}
        return {
            "format": STATE_FORMAT, "version": STATE_VERSION,
            "policy": {"fingerprint": self.spec.fingerprint, "backend": self.spec.backend,
                       "features": list(self.spec.features), "env": asdict(self.env)},
            "start_ns": self._start_ns,
            "start": None if self._start_ns is None else pd.Timestamp(self._start_ns).isoformat(),
            "bars": self._bars, "digest": self._digest.hex(), "last_time_ns": self._last_ns,
            "last_time": None if self._last_ns is None else pd.Timestamp(self._last_ns).isoformat(),
            "since_start": self._since_start, "closes": list(self._closes), "window": self._window.tolist(),
            "opened": self._opened, "ledger": ledger,
            "features": {"names": list(self.spec.features), **feature_constants(),
                         "rows": [[None if math.isnan(v) else v for v in row.tolist()] for row in self._feat_rows]},
            "lstm": {"h": self._h[0].tolist(), "c": self._c[0].tolist()},
            "action": int(self._action[0]), "fill": None if self._fill is None else list(self._fill),
            "bust": self._bust, "decision": None if self._decision is None else self._decision._state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` output. UsageError (one line) for a state of another policy,
        backend, costs or feature set, or one that is not a state of this format."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise UsageError("not a policy state (no 'format': 'ppo-lstm-trader policy state')")
        if state.get("version") != STATE_VERSION:
            raise UsageError(f"policy state version {state.get('version')!r}; this version reads {STATE_VERSION}")
        self._check_owner(state.get("policy"))
        try:
            self._restore(state)
        except UsageError:
            self.reset()
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as err:
            self.reset()
            raise UsageError(f"not a valid policy state ({one_line(err)})") from None

    def _check_owner(self, saved: Any) -> None:
        if not isinstance(saved, dict) or not isinstance(saved.get("fingerprint"), str):
            raise UsageError("not a valid policy state (no 'policy' entry with a fingerprint)")
        if saved["fingerprint"] != self.spec.fingerprint:
            raise UsageError(f"the state was written by another policy (fingerprint {saved['fingerprint'][:12]}, "
                             f"this one's {self.spec.fingerprint[:12]}); use the checkpoint that wrote it, or start "
                             f"a new state")
        if saved.get("backend") != self.spec.backend:
            raise UsageError(f"the state was written through the {saved.get('backend')} route, this policy runs "
                             f"through the {self.spec.backend} route (their float rounding differs); start a new "
                             f"state for this route")
        if list(saved.get("features", [])) != list(self.spec.features):
            raise UsageError(f"the state's feature columns {saved.get('features')} are not this policy's "
                             f"{list(self.spec.features)}")
        env = saved.get("env")
        if env != asdict(self.env):
            ours = asdict(self.env)
            diff = [k for k in ours if not isinstance(env, dict) or env.get(k) != ours[k]]
            shown = ", ".join(f"{k} {env.get(k) if isinstance(env, dict) else None!r} (now {ours[k]!r})"
                              for k in diff[:3])
            raise UsageError(f"the state was written with other settings: {shown}; pass the same --fee-bps/"
                             f"--slippage-bps, or start a new state")

    def _restore(self, s: dict[str, Any]) -> None:
        W, H = self.env.window, self.spec.lstm_size
        self.reset()
        self._start_ns = None if s["start_ns"] is None else int(s["start_ns"])
        self._bars = int(s["bars"])
        self._digest = bytes.fromhex(s["digest"])
        self._last_ns = None if s["last_time_ns"] is None else int(s["last_time_ns"])
        self._since_start = int(s["since_start"])
        closes = [float(v) for v in s["closes"]]
        window = np.asarray(s["window"], dtype=np.float32)
        h = np.asarray(s["lstm"]["h"], dtype=np.float32)[None]
        c = np.asarray(s["lstm"]["c"], dtype=np.float32)[None]
        if not (0 <= self._since_start <= self._bars and len(closes) == min(self._bars, W)
                and window.shape == (W,) and h.shape == c.shape == (1, H) and len(self._digest) in (0, 32)
                and (self._bars == 0) == (self._last_ns is None)):
            raise ValueError("its counts, closes, window or LSTM state do not fit this policy")
        self._closes, self._window, self._h, self._c = closes, window, h, c
        self._restore_features(s.get("features"))
        self._opened = bool(s["opened"])
        if self._opened and self._since_start <= W:
            raise ValueError("'opened' does not match the bars consumed")
        if self._opened:
            arrays = {}
            for name, now in self._ledger.arrays().items():
                value = np.asarray(s["ledger"][name], dtype=np.float64)
                if value.shape != now.shape:
                    raise ValueError(f"ledger[{name!r}] has shape {value.shape}, expected {now.shape}")
                arrays[name] = value
            self._ledger.set_state(arrays)
            action = int(s["action"])
            if not 0 <= action < self.env.num_actions:
                raise ValueError(f"action {action} is not in 0..{self.env.num_actions - 1}")
            self._action[0] = action
            if s["fill"] is not None:
                price, lots = s["fill"]
                self._fill = (float(price), int(lots))
            self._bust = bool(s["bust"])
            self._decision = Decision._from_state(s["decision"], self.spec.positions, self.env.obs_dim)

    def _restore_features(self, saved: Any) -> None:
        """The feature normaliser's rows; ValueError unless they fit this policy and its constants."""
        if not self._nfeat and saved is None:
            return  # a state of a policy without features may lack the entry
        if not isinstance(saved, dict):
            raise ValueError("no 'features' entry")
        if saved.get("names") != list(self.spec.features):
            raise ValueError(f"its feature normaliser's columns {saved.get('names')} are not the policy's "
                             f"{list(self.spec.features)}")
        if not self._nfeat:
            return
        ours = feature_constants()
        other = [f"{k} {saved.get(k)!r} (now {v!r})" for k, v in ours.items() if saved.get(k) != v]
        if other:
            raise UsageError(f"the state's feature normaliser has other constants: {', '.join(other)}; start a new "
                             f"state")
        rows = np.array([[np.nan if v is None else float(v) for v in row] for row in saved["rows"]],
                        dtype=np.float64).reshape(-1, self._nfeat)
        if len(rows) != min(self._bars, FEATURE_WINDOW) or np.isinf(rows).any():
            raise ValueError(f"its feature normaliser holds {len(rows)} rows; {min(self._bars, FEATURE_WINDOW)} "
                             f"expected after {self._bars} bars")
        defined = ~np.isnan(rows)
        if (np.logical_or.accumulate(defined, axis=0) & ~defined).any():
            raise ValueError("its feature normaliser holds a NaN after a column's first value")
        self._feat_rows.extend(rows)
        if len(rows):
            self._feat_z = feature_zscores(rows, FEATURE_WINDOW)[-1]

    def save_state(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to ``path`` as JSON, atomically (a temp file renamed over it)."""
        path = Path(path)
        text = json.dumps(self.state_dict(), allow_nan=False, separators=(",", ":")) + "\n"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise UsageError(f"cannot write the state file {path}: {err.strerror or err}; check the directory "
                             f"exists and is writable") from None

    def load_state(self, path: str | os.PathLike) -> None:
        """Restore a state file written by :meth:`save_state` (JSON: nothing in it is executed)."""
        path = Path(path)
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"state file {path} not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UsageError(f"{path}: not a policy state file ({one_line(err)}); delete it to start a new "
                             f"state") from None
        try:
            self.load_state_dict(state)
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from None

    def verify_history(self, data: MarketData) -> None:
        """UsageError unless ``data``'s first ``bars`` bars are exactly the bars this stream consumed."""
        n = self._bars
        if len(data) < n:
            raise UsageError(f"{data.source}: has {len(data)} bars, fewer than the {n} the state has consumed "
                             f"(up to {self.last_time}); pass the file the state was built on, or start a new "
                             f"state")
        stamps = np.asarray(data.timestamps[:n]).astype(_NS).view(np.int64)
        raw = self._features_of(data)
        records = bar_records(stamps, data.open[:n], data.high[:n], data.low[:n], data.close[:n], data.volume[:n],
                              None if raw is None else raw[:n])
        if chain_digest(b"", records) != self._digest:
            raise UsageError(f"{data.source}: its first {n} bars (to {pd.Timestamp(int(stamps[-1])) if n else '-'}) "
                             f"are not the {n} bars the state has consumed (to {self.last_time}): another file, or "
                             f"its history was revised (e.g. re-adjusted prices); start a new state")


def parse_start(start: str) -> pd.Timestamp:
    """``--start`` as a naive-UTC timestamp (the loader's rule); UsageError when it is not a date."""
    try:
        return _parse_date(start, "--start")[0].as_unit("ns")
    except DataError as err:
        raise UsageError(str(err)) from None


def with_costs(env: EnvConfig, fee_bps: Optional[float], slippage_bps: Optional[float]) -> EnvConfig:
    """``env`` with the cost overrides that are not None (UsageError unless finite and >= 0)."""
    for flag, value in (("--fee-bps", fee_bps), ("--slippage-bps", slippage_bps)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag} must be a number >= 0, got {value}")
    if fee_bps is not None:
        env = replace(env, fee_bps=float(fee_bps))
    if slippage_bps is not None:
        env = replace(env, slippage_bps=float(slippage_bps))
    return env


def as_market_data(source: Source, date_format: Optional[str] = None,
                   features: tuple[str, ...] = ()) -> MarketData:
    """``source`` as validated bars: a ``MarketData`` as it is; a DataFrame or file through
    ``envs.data.load_ohlcv``, with the feature columns ``features`` (DataError becomes
    UsageError: a file lacking one of them is refused, naming the column)."""
    if isinstance(source, MarketData):
        return source
    try:
        return load_ohlcv(source, date_format, features=features)
    except DataError as err:
        if features and "feature column" in str(err):
            raise UsageError(f"{err} (the policy was trained with --features {','.join(features)})") from None
        raise UsageError(str(err)) from None
