"""``Decision``: what a ``TradingPolicy`` decided after a bar closed, for the next bar."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .times import iso, stamp


@dataclass(frozen=True, eq=False)
class Decision:
    """The decision taken after the bar of ``time`` closed, for the next bar.

    ``target_position``: signed lots to hold during the next bar (traded at its open);
    ``position``: lots held now, during the bar of ``time``; ``probabilities`` [A] and
    ``logits`` [A]: of the actions whose lots are ``positions``; ``value``: the critic's
    estimate (reward units); ``equity``: the paper account's equity at ``time``'s close;
    ``bust``: the account reached 0 and is kept flat; ``bar``: the bar's index in the
    stream (0 = the first bar consumed); ``observation`` [D] float32: the network's input.
    ``time`` is a ``numpy.datetime64[ns]``, naive UTC (``pandas.Timestamp(decision.time)`` for a
    pandas one); ``to_dict`` writes it as ISO 8601 text.
    """

    time: np.datetime64
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
            "time": iso(self.time_ns), "target_position": self.target_position, "position": self.position,
            "probabilities": {str(p): q for p, q in zip(self.positions, self.probabilities)},
            "value": self.value, "logits": list(self.logits), "equity": self.equity, "bust": self.bust,
        }

    @property
    def time_ns(self) -> int:
        """``time`` as naive-UTC nanoseconds."""
        return int(np.datetime64(self.time, "ns").view(np.int64))

    def _state(self) -> dict[str, Any]:
        return {"time_ns": self.time_ns, "bar": self.bar, "target_position": self.target_position,
                "position": self.position, "logits": list(self.logits), "value": self.value,
                "equity": self.equity, "bust": self.bust, "observation": self.observation.tolist()}

    @classmethod
    def _from_state(cls, s: dict[str, Any], positions: tuple[int, ...], dim: int) -> "Decision":
        obs = np.asarray(s["observation"], dtype=np.float32)
        logits = tuple(float(v) for v in s["logits"])
        if obs.shape != (dim,) or len(logits) != len(positions) or int(s["target_position"]) not in positions:
            raise ValueError("the last decision's observation, logits or target do not fit this policy")
        return cls(time=stamp(int(s["time_ns"])), bar=int(s["bar"]), target_position=int(s["target_position"]),
                   position=int(s["position"]), positions=positions, logits=logits, value=float(s["value"]),
                   equity=float(s["equity"]), bust=bool(s["bust"]), observation=obs)
