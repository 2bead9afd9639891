"""``MarketData``: validated bars, oldest first (without pandas: the loader, ``loading.py``, makes them
from a file; ``ppo_lstm.deploy``'s pandas-free readers make them too)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np

from envs.data.calendar import bars_per_year
from envs.data.features import first_defined_bar

__all__ = ["MarketData"]


@dataclass(frozen=True, eq=False)
class MarketData:
    """Validated bars, oldest first. ``eq=False``: instances compare by identity (fields are arrays)."""

    source: str
    timestamps: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    bar_seconds: float
    feature_names: tuple[str, ...] = ()  # the --features columns, as the file names them
    features: Optional[np.ndarray] = None  # [n, F] float64 raw values; NaN only in a column's warm-up rows

    def __len__(self) -> int:
        return int(self.close.shape[0])

    @property
    def first_defined(self) -> int:
        """The first bar where every feature is defined (0 without features)."""
        return first_defined_bar(self.features)

    @property
    def name(self) -> str:
        """The file's name without its folder (an instrument's label in reports)."""
        return os.path.basename(self.source)

    @cached_property
    def periods_per_year(self) -> float:
        """Bars per year, for annualising returns and volatility, counted from the file's own
        timestamps (:func:`envs.data.calendar.bars_per_year`: the median bar count of its full
        calendar years, else the rate over its whole weeks): about 252 for exchange daily bars,
        365 for daily crypto, about 1,764 for NYSE hourly bars, 8,760 for 24/7 hourly bars.
        NaN with fewer than 2 bars. Computed once per instance."""
        return bars_per_year(self.timestamps)
