"""One session: an instrument's ``TradingPolicy`` stream, its state files, and the one-bar-once rule.

A session is opened on its history (the warm-up rule of ``predict-ppo-lstm``: the history through the
data loader, then ``TradingPolicy.warm_up``) and then fed one bar at a time. Every change (a bar, a
fill) is written atomically (``state_files.py``) before it is answered: the state is predict's format
and SHA chain (``ppo_lstm.deploy.state``), with a ``serve`` entry of its own under the same seal:
the chain's digest before the last bar, the widest gap of the history, and the last answer's gap.

A bar of the last bar's time whose chain digest (the digest before it, then its record) is the
state's is a duplicate: the answer is the last one again and nothing is consumed. Another bar of
that time, or an older one, is refused with 409. A bar refused by the policy leaves the stream as
it was (it is restored from the state on disk); so does a state that cannot be written (503).
"""
from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, Optional

import numpy as np

from ..deploy.bars import bar_time_ns, check_start, feature_row
from ..deploy.policy import TradingPolicy
from ..deploy.predict import too_few
from ..deploy.state import bar_records, read_state_file, sealed_file
from ..deploy.times import iso as _iso
from ..deploy.times import shown
from ..errors import UsageError
from .errors import RequestError
from .history import chain_before_last, history_data, widest_gap_ns
from .models import Bar, Fill, OpenSession
from .state_files import StateFiles

SERVE_KEY = "serve"


class Session:
    """An instrument's stream: ``policy``, its state ``files``, and ``lock`` (one request at a time)."""

    def __init__(self, name: str, policy: TradingPolicy, files: StateFiles, entry: dict[str, Any]) -> None:
        self.name, self.policy, self.files = name, policy, files
        self.entry = entry  # the state's serve entry: prev_digest, max_gap_ns, gap
        self.saved: dict[str, Any] = {}  # the state on disk
        self.lock = threading.Lock()
        self.closed = False

    # ------------------------------------------------------------------ construction

    @classmethod
    def open(cls, name: str, policy: TradingPolicy, files: StateFiles, request: OpenSession) -> "Session":
        """A new session warmed on ``request``'s history, its state written (UsageError for bad input)."""
        spec = policy.spec
        data = history_data(request.bars, spec.features)
        check_start(data, request.start)  # a bar at or after start, as predict requires
        if policy.warm_up(data, request.start, warn=False) is None:  # the answer says it (warm_up_warning)
            raise too_few(policy, "the history", policy.bars)
        prev = chain_before_last(data, spec.features, policy.env.features)
        entry = {"name": name, "prev_digest": prev.hex(), "max_gap_ns": widest_gap_ns(data), "gap": None,
                 "warm_up_warning": policy.warm_up_warning}
        session = cls(name, policy, files, entry)
        session._save()
        return session

    @classmethod
    def restore(cls, name: str, policy: TradingPolicy, files: StateFiles) -> "Session":
        """The session of the newest state file of ``files`` (UsageError, one line, for one this server cannot use)."""
        path = files.latest()
        if path is None:
            raise UsageError("holds no state file")
        state = read_state_file(path)
        policy.load_state_dict(state)
        entry = state.get(SERVE_KEY)
        if not (isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get("prev_digest"), str)
                and policy.decision is not None):
            raise UsageError("not a state serve-ppo-lstm wrote for this session name (no 'serve' entry naming it, "
                             "or no decision)")
        session = cls(name, policy, files, entry)
        session.saved = state
        return session

    # ------------------------------------------------------------------ requests

    def post(self, bar: Bar) -> dict[str, Any]:
        """Consume ``bar`` and answer with the decision for the next bar (see the module docstring)."""
        policy = self.policy
        t = bar_time_ns(bar.time)
        last_ns = int(policy.last_time.view(np.int64))  # a session is opened on a decision: it has bars
        if t <= last_ns:
            if t == last_ns and self._repeats_last(bar, t):
                return self.answer(duplicate=True)
            what = "another bar of the same time as" if t == last_ns else "older than"
            raise RequestError(409, f"session {self.name}: bar {_iso(t)} is {what} the last bar consumed "
                                    f"({_iso(last_ns)}, bar {policy.bars - 1}); post bars once each, in time order")
        gap = self._gap(t, last_ns)
        prev = self.saved["digest"]
        self._apply(lambda: policy.update(bar.time, bar.open, bar.high, bar.low, bar.close, bar.volume,
                                          bar.features),
                    {**self.entry, "prev_digest": prev, "gap": gap})
        return self.answer()

    def fill(self, fill: Fill) -> None:
        """Report the real fill of the pending decision (booked at the next bar's open)."""
        self._apply(lambda: self.policy.fill(fill.price, fill.lots), self.entry)

    def _apply(self, change: Callable[[], Any], entry: dict[str, Any]) -> None:
        """Make ``change`` to the stream and write the state with ``entry``; on any failure the stream is
        put back as the state on disk holds it."""
        try:
            change()
            state = self._write(entry)
        except BaseException:
            self.policy.load_state_dict(self.saved)
            raise
        self.saved, self.entry = state, entry

    def _save(self) -> None:
        self.saved = self._write(self.entry)

    def _write(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The stream's state with ``entry``, written to the state file (503 when it cannot be)."""
        state, data = sealed_file(self.policy.state_body({SERVE_KEY: entry}))
        try:
            self.files.write(data)
        except OSError as err:
            raise RequestError(503, f"session {self.name}: could not write its state in {self.files.folder} "
                                    f"({err.strerror or err}); nothing was consumed: free disk space and post "
                                    f"again") from None
        return state

    def _repeats_last(self, bar: Bar, t: int) -> bool:
        """Whether ``bar`` is the last bar consumed again: its record continues the chain to the state's digest."""
        spec = self.policy.spec
        raw = feature_row(bar.features, spec.features, shown(t))
        record = bar_records(np.array([t]), *([v] for v in (bar.open, bar.high, bar.low, bar.close, bar.volume)),
                             raw)[0]
        digest = hashlib.sha256(bytes.fromhex(self.entry["prev_digest"]) + record.tobytes()).hexdigest()
        return digest == self.saved["digest"]

    def _gap(self, t: int, last_ns: int) -> Optional[dict[str, Any]]:
        """The answer's ``gap`` for a bar at ``t`` after one at ``last_ns`` (None within the history's widest)."""
        allowed = self.entry.get("max_gap_ns")
        if allowed is None or t - last_ns <= allowed:
            return None
        seconds, limit = (t - last_ns) / 1e9, allowed / 1e9
        return {"seconds": seconds, "allowed_seconds": limit,
                "message": f"{seconds / 86400:g} days since the previous bar ({_iso(last_ns)}), wider than any gap "
                           f"of the history ({limit / 86400:g} days): bars may be missing; the decision is the "
                           f"policy's on the bars it was given"}

    # ------------------------------------------------------------------ answers

    def answer(self, duplicate: bool = False) -> dict[str, Any]:
        """The answer to the last bar (``DecisionAnswer``)."""
        policy, decision = self.policy, self.policy.decision
        assert decision is not None  # a session is opened on a decision
        fill = self.saved.get("fill")
        opened = policy.opened_at
        return {
            "session": self.name,
            "bar": {"time": _iso(decision.time), "index": decision.bar},
            "decision": {"target_position": decision.target_position, "position": decision.position,
                         "trade": decision.target_position - decision.position,
                         "probabilities": {str(p): q for p, q in zip(decision.positions, decision.probabilities)},
                         "logits": list(decision.logits), "value": decision.value},
            "account": {"equity": decision.equity, "position": policy.position, "bust": decision.bust,
                        "opened_at": None if opened is None else _iso(opened),
                        "pending_fill": None if fill is None else {"price": fill[0], "lots": fill[1]}},
            "duplicate": duplicate,
            "gap": self.entry.get("gap"),
        }

    def view(self) -> dict[str, Any]:
        """The session (``SessionOut``)."""
        policy, allowed = self.policy, self.entry.get("max_gap_ns")
        return {"session": self.name, "route": policy.spec.backend, "fingerprint": policy.spec.fingerprint,
                "bars": policy.bars, "start": None if policy.start is None else _iso(policy.start),
                "features": list(policy.spec.features),
                "allowed_gap_seconds": None if allowed is None else allowed / 1e9,
                "warm_up_warning": self.entry.get("warm_up_warning"), "last": self.answer()}

