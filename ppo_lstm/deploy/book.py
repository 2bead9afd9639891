"""The paper account of a streaming policy: the env's ``Ledger`` for one env and the pending trade.

``PaperBook`` opens flat with ``initial_cash`` at the first decision, books each pending
decision at the next bar's open with the configured slippage and fee (or at the price a
reported fill gave), marks it at the close, and keeps an account whose equity reached 0
flat (``bust``), as the backtest does.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from envs.config import EnvConfig
from envs.ledger import Ledger

from ..errors import UsageError


class PaperBook:
    """One env's ledger, the pending decision ``action`` [1] (an action index), a reported
    ``fill`` (price, signed lots) or None, and ``bust``."""

    def __init__(self, env: EnvConfig) -> None:
        self.env = env
        self.flat = 0 if env.no_short else env.max_position  # action index of 0 lots
        self.ledger = Ledger(1, env)
        self.reset()

    def reset(self) -> None:
        self.opened = False
        self.action = np.full(1, self.flat, np.int64)
        self.fill: Optional[tuple[float, int]] = None
        self.bust = False

    @property
    def position(self) -> int:
        """Lots held now (0 before the account opened)."""
        return int(self.ledger.pos[0]) if self.opened else 0

    @property
    def equity(self) -> Optional[float]:
        """Equity at the last close (None before the account opened)."""
        return float(self.ledger.equity[0]) if self.opened else None

    def open(self, close: float) -> None:
        """Open the account flat at ``close``."""
        self.ledger.open(slice(None), np.array([close]))
        self.opened = True

    def decide(self, logits: np.ndarray) -> int:
        """The pending action index after ``logits`` [A]: the greedy one, or flat once bust."""
        action = self.flat if self.bust else int(np.argmax(logits))
        self.action[0] = action
        return action

    def set_fill(self, price: float, lots: int, positions: tuple[int, ...]) -> None:
        """Record the real fill of the pending decision (UsageError unless it can be one)."""
        if not self.opened:
            raise UsageError("fill() reports the fill of a decision; no decision has been taken yet")
        price = float(price)
        if not (math.isfinite(price) and price > 0):
            raise UsageError(f"fill price must be finite and > 0, got {price}")
        if int(lots) != lots or int(lots) not in positions:
            raise UsageError(f"fill lots must be one of {list(positions)}, got {lots}")
        self.fill = (price, int(lots))

    def book(self, open_: float, close: float) -> None:
        """The pending decision, filled at this bar's open (or as ``fill`` said), marked at its close."""
        ledger = self.ledger
        if self.fill is None:
            ledger.step(self.action, np.array([open_]), np.array([close]))
        else:
            price, lots = self.fill
            self.fill = None
            slip, ledger.slip = ledger.slip, 0.0  # the reported price already includes any slippage
            try:
                ledger.step(np.array([lots + self.flat]), np.array([price]), np.array([close]))
            finally:
                ledger.slip = slip
        self.bust |= bool(ledger.equity[0] <= 0.0)

    def ledger_state(self) -> Optional[dict[str, Any]]:
        """The ledger's arrays as JSON lists (None before the account opened)."""
        if not self.opened:
            return None
        return {name: np.asarray(value).tolist() for name, value in self.ledger.get_state().items()}

    def restore(self, s: dict[str, Any]) -> None:
        """An opened account from a policy state's ``ledger``, ``action``, ``fill`` and ``bust``
        (ValueError when they do not fit this env)."""
        arrays = {}
        for name, now in self.ledger.arrays().items():
            value = np.asarray(s["ledger"][name], dtype=np.float64)
            if value.shape != now.shape:
                raise ValueError(f"ledger[{name!r}] has shape {value.shape}, expected {now.shape}")
            arrays[name] = value
        self.ledger.set_state(arrays)
        self.opened = True
        action = int(s["action"])
        if not 0 <= action < self.env.num_actions:
            raise ValueError(f"action {action} is not in 0..{self.env.num_actions - 1}")
        self.action[0] = action
        if s["fill"] is not None:
            price, lots = s["fill"]
            self.fill = (float(price), int(lots))
        self.bust = bool(s["bust"])
