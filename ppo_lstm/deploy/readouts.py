"""``StreamReadouts``: what a caller reads of a ``TradingPolicy`` stream (its base class).

The latest decision, the bars consumed and their times, ``start`` and the first decision bar,
the feature columns still without a value, and the paper book's position and equity.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .book import PaperBook
from .decision import Decision
from .spec import PolicySpec
from .state import BarChain
from .times import stamp
from .windows import FeatureWindow


class StreamReadouts:
    """What a caller reads of a stream (``TradingPolicy``'s base): its decision, bars and book."""

    spec: PolicySpec
    _chain: BarChain
    _book: PaperBook
    _features: FeatureWindow
    _decision: Optional[Decision]
    _opened_ns: Optional[int]

    @property
    def decision(self) -> Optional[Decision]:
        """The latest decision (None while warming up)."""
        return self._decision

    @property
    def bars(self) -> int:
        """Bars consumed."""
        return self._chain.bars

    @property
    def bars_from_start(self) -> int:
        """Bars consumed at or after ``start`` (decisions begin at the first of them, once
        ``window + 1`` bars are consumed in all)."""
        return self._chain.since_start

    @property
    def last_time(self) -> Optional[np.datetime64]:
        """Time of the last bar consumed (``numpy.datetime64[ns]``, naive UTC, as every time read here)."""
        return self._chain.last_time

    @property
    def start(self) -> Optional[np.datetime64]:
        """The ``start`` this stream was begun with (None: from the first bar)."""
        return None if self._chain.start_ns is None else stamp(self._chain.start_ns)

    @property
    def opened_at(self) -> Optional[np.datetime64]:
        """The first decision bar: the account opened at its close (None while warming up)."""
        return None if self._opened_ns is None else stamp(self._opened_ns)

    def undefined_features(self) -> list[str]:
        """The feature columns without a value at the last bar consumed (their warm-up): no
        decision is taken while there are any."""
        if not self._chain.bars:
            return list(self.spec.features)
        return self._features.undefined()

    @property
    def position(self) -> int:
        """Lots held now (0 before the first decision)."""
        return self._book.position

    @property
    def equity(self) -> Optional[float]:
        """The paper account's equity at the last close (None before the first decision)."""
        return self._book.equity
