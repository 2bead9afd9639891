"""A streaming policy's saved state: its format, the chain of the bars consumed, and the state file.

The state is plain JSON data (``TradingPolicy.state_dict``). ``check_state`` refuses
data that is not a state of this format and version, or one written by another policy,
route, feature set, EMA spans or costs (``check_owner``). ``BarChain`` counts the bars consumed and
hashes each in turn (``bar_records``: time, OHLCV and feature values; ``chain_digest``),
so ``BarChain.verify`` refuses a file whose earlier bars differ. ``seal`` adds the
SHA-256 of everything else in the state (the derived state too: position, cash, bust,
windows, normaliser, EMAs, LSTM state), and ``check_seal`` refuses a state edited after it was
written. ``state_lock`` lets one call at a time use a state file.
``write_state_file`` and ``read_state_file`` write it atomically and read it back
(JSON: nothing in it is executed; NaN, Infinity and out-of-range numbers are refused).
A version-1 state (no seal) is read as it is, and written back sealed.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Optional

import numpy as np

from envs.config import EnvConfig
from envs.data import MarketData

from ..errors import UsageError, one_line
from .files import atomic_write, waiting_lock
from .bars import features_of
from ..config.migrate import fingerprint_env_settings
from .spec import PolicySpec
from .times import iso, shown, stamp

STATE_FORMAT = "ppo-lstm-trader policy state"
STATE_VERSION = 2  # 2: sealed (``state_digest``); 1 (no seal) is read and written back as 2
READ_VERSIONS = (1, 2)
SEAL_KEY = "state_digest"
STATE_LOCK_WAIT_S = 10.0  # how long a call waits for another one using the same state file
_NS = np.dtype("datetime64[ns]")


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


class BarChain:
    """The bars a stream consumed: ``bars`` (how many), ``since_start`` (how many at or after
    ``start_ns``; None: from the first), ``last_ns`` (the last one's time, ns; None before any)
    and ``digest`` (the SHA-256 chain of their records; empty before any)."""

    def __init__(self, start_ns: Optional[int] = None) -> None:
        self.start_ns = start_ns
        self.bars = 0
        self.since_start = 0
        self.digest = b""
        self.last_ns: Optional[int] = None

    @property
    def last_time(self) -> Optional[np.datetime64]:
        return None if self.last_ns is None else stamp(self.last_ns)

    def _last_shown(self) -> str:
        return "None" if self.last_ns is None else shown(self.last_ns)

    def add(self, record: np.ndarray, t: int) -> None:
        """One more bar: its record [6+F] (``bar_records``) and time ``t`` (ns)."""
        self.digest = hashlib.sha256(self.digest + record.tobytes()).digest()
        self.bars += 1
        self.last_ns = t
        if self.start_ns is None or t >= self.start_ns:
            self.since_start += 1

    def state(self) -> dict[str, Any]:
        """The policy state's entries from ``start_ns`` to ``since_start``."""
        start, last = self.start_ns, self.last_ns
        return {"start_ns": start, "start": None if start is None else iso(start),
                "bars": self.bars, "digest": self.digest.hex(), "last_time_ns": last,
                "last_time": None if last is None else iso(last),
                "since_start": self.since_start}

    def restore(self, s: dict[str, Any]) -> None:
        """Read the entries of :meth:`state` back (checked by :meth:`consistent`)."""
        self.start_ns = None if s["start_ns"] is None else int(s["start_ns"])
        self.bars = int(s["bars"])
        self.digest = bytes.fromhex(s["digest"])
        self.last_ns = None if s["last_time_ns"] is None else int(s["last_time_ns"])
        self.since_start = int(s["since_start"])

    def consistent(self) -> bool:
        """The counts, digest and last time fit together."""
        return (0 <= self.since_start <= self.bars and len(self.digest) in (0, 32)
                and (self.bars == 0) == (self.last_ns is None))

    def verify(self, data: MarketData, features: tuple[str, ...], trained_with: str) -> None:
        """UsageError unless ``data``'s first ``bars`` bars, with their values of the feature columns
        ``features`` (``trained_with``: the policy's ``--features``), are exactly the bars of this chain."""
        n = self.bars
        if len(data) < n:
            raise UsageError(f"{data.source}: has {len(data)} bars, fewer than the {n} the state has consumed "
                             f"(up to {self._last_shown()}); pass the file the state was built on, or start a new "
                             f"state")
        stamps = np.asarray(data.timestamps[:n]).astype(_NS).view(np.int64)
        raw = features_of(data, features, trained_with)
        records = bar_records(stamps, data.open[:n], data.high[:n], data.low[:n], data.close[:n], data.volume[:n],
                              None if raw is None else raw[:n])
        if chain_digest(b"", records) != self.digest:
            raise UsageError(f"{data.source}: its first {n} bars (to {shown(int(stamps[-1])) if n else '-'}) "
                             f"are not the {n} bars the state has consumed (to {self._last_shown()}): another file, or "
                             f"its history was revised (e.g. re-adjusted prices); start a new state")


def check_state(state: Any, spec: PolicySpec, env: EnvConfig) -> int:
    """UsageError unless ``state`` is a policy state of this format and a version this one reads,
    written by this policy (``spec``) with these settings (``env``). Returns its version."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise UsageError("not a policy state (no 'format': 'ppo-lstm-trader policy state')")
    version = state.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise UsageError(f"policy state version {version!r}; this version reads {', '.join(map(str, READ_VERSIONS))}")
    check_owner(state.get("policy"), spec, env)
    return int(version)


def _canonical(body: dict[str, Any]) -> bytes:
    """``body``'s canonical JSON: sorted keys, no spaces, floats as ``repr`` (which a JSON round trip keeps)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def state_seal(state: dict[str, Any]) -> str:
    """The SHA-256 (hex) of ``state`` without its seal: its canonical JSON."""
    return hashlib.sha256(_canonical({key: value for key, value in state.items() if key != SEAL_KEY})).hexdigest()


def sealed_file(body: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """A state ``body`` (no seal yet) sealed, and the bytes of its file: the canonical JSON the seal is the
    hash of, with the seal as its last entry (one JSON encoding for both)."""
    if not body or SEAL_KEY in body:
        raise ValueError("a state body holds entries and no seal")
    text = _canonical(body)
    digest = hashlib.sha256(text).hexdigest()
    return {**body, SEAL_KEY: digest}, text[:-1] + f',"{SEAL_KEY}":"{digest}"}}\n'.encode()


def seal(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its seal (``state_digest``) added."""
    return {**state, SEAL_KEY: state_seal(state)}


def check_seal(state: dict[str, Any], version: int) -> None:
    """UsageError unless a state of ``version`` 2 carries the seal of its contents (version 1 has none)."""
    if version < 2:
        return
    try:
        fits = state.get(SEAL_KEY) == state_seal(state)
    except ValueError:  # a non-finite number (only from a dict in memory: the file reader refuses them)
        fits = False
    if not fits:
        raise UsageError(f"its contents do not match its '{SEAL_KEY}': the state was edited or damaged after "
                         f"predict-ppo-lstm wrote it; rebuild it with one call on the data file and the same "
                         f"--start, naming a new --state")


def policy_entry(spec: PolicySpec, env: EnvConfig) -> dict[str, Any]:
    """A state's ``policy`` entry: what ``check_owner`` compares."""
    return {"fingerprint": spec.fingerprint, "backend": spec.backend, "features": list(spec.features),
            "ema_spans": list(spec.ema_spans), "env": fingerprint_env_settings(env)}


def check_owner(saved: Any, spec: PolicySpec, env: EnvConfig) -> None:
    """UsageError unless a state's ``policy`` entry is this policy's: fingerprint, route, feature
    columns, EMA spans (none when the entry lacks them) and env settings."""
    if not isinstance(saved, dict) or not isinstance(saved.get("fingerprint"), str):
        raise UsageError("not a valid policy state (no 'policy' entry with a fingerprint)")
    if saved["fingerprint"] != spec.fingerprint:
        raise UsageError(f"the state was written by another policy (fingerprint {saved['fingerprint'][:12]}, "
                         f"this one's {spec.fingerprint[:12]}); use the checkpoint that wrote it, or start "
                         f"a new state")
    if saved.get("backend") != spec.backend:
        raise UsageError(f"the state was written through the {saved.get('backend')} route, this policy runs "
                         f"through the {spec.backend} route (their float rounding differs); start a new "
                         f"state for this route")
    if list(saved.get("features", [])) != list(spec.features):
        raise UsageError(f"the state's feature columns {saved.get('features')} are not this policy's "
                         f"{list(spec.features)}")
    if saved.get("ema_spans", []) != list(spec.ema_spans):
        raise UsageError(f"the state's EMA spans {saved.get('ema_spans')} are not this policy's "
                         f"{list(spec.ema_spans)} (--ema-spans); start a new state")
    saved_env, ours = saved.get("env"), fingerprint_env_settings(env)
    if saved_env != ours:
        theirs = saved_env if isinstance(saved_env, dict) else {}
        diff = [k for k in {**ours, **theirs} if theirs.get(k) != ours.get(k)]
        shown = ", ".join(f"{k} {theirs.get(k)!r} (now {ours.get(k)!r})" for k in diff[:3])
        raise UsageError(f"the state was written with other settings: {shown}; pass the same --fee-bps/"
                         f"--slippage-bps, or start a new state")


def state_text(state: dict[str, Any]) -> bytes:
    """A state as the bytes of its file: compact JSON and a newline (NaN and Infinity refused)."""
    return (json.dumps(state, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")


def write_state_file(path: str | os.PathLike, state: dict[str, Any], fsync: bool = True) -> None:
    """Write ``state`` to ``path`` as JSON, atomically (a temp file renamed over it; with ``fsync``, on disk
    before this returns)."""
    path = Path(path)
    try:
        atomic_write(path, state_text(state), fsync)
    except OSError as err:
        raise UsageError(f"the state file: could not write {path}: {err.strerror or err}; check that its "
                         f"directory exists and is writable") from None


def state_lock(path: str | os.PathLike) -> Any:
    """A context manager that holds ``<path>.lock`` (an exclusive ``flock``): one call at a time
    reads, updates and writes the state; a second waits up to :data:`STATE_LOCK_WAIT_S`
    seconds, then is refused (UsageError, one line)."""
    path = Path(path)
    wait = STATE_LOCK_WAIT_S
    return waiting_lock(path.with_name(path.name + ".lock"), wait,
                        f"--state {path} is in use by another call (still locked after {wait:g} s: "
                        f"{path.name}.lock); run the calls one after the other")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"the literal {name}")


def read_state_file(path: str | os.PathLike) -> Any:
    """The JSON data of a state file (UsageError, one line, when it cannot be read as JSON, or holds
    NaN, Infinity or a number out of a float's range: a state's numbers are finite)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_float=_finite, parse_constant=_no_constant)
    except FileNotFoundError:
        raise UsageError(f"state file {path} not found") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not a policy state file ({one_line(err)}); delete it to start a new "
                         f"state") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not a policy state file ({one_line(err)}); delete it to start a new "
                         f"state") from None
    except ValueError as err:
        raise UsageError(f"{path}: holds {err}, and a policy state holds finite numbers only: it was edited or "
                         f"damaged; rebuild it with one call on the data file and the same --start, naming a new "
                         f"--state") from None
