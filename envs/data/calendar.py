"""Bars per year, counted from the bars' own timestamps (for annualising returns and volatility).

``bars_per_year(timestamps)``, in order of preference:

1. **Full calendar years.** The years strictly between the first bar's year and the last
   bar's year hold bars from January 1 to December 31; the figure is the median over them of
   each year's bars per 365 days (a leap year's count times 365/366, so a market open every
   day gives 365 in every year). Exchange daily bars give about 252 (holidays and all; the
   median is not moved by one year with an odd closure), daily crypto 365, NYSE hourly bars
   (09:30 to 15:30) about 1,764, 24/7 hourly bars 8,760.
2. **Whole weeks.** With no full calendar year, but a week or more: the bars of the longest
   run of whole weeks from the first bar, per day, times 365. Whole weeks hold weekends (and
   trading days) in the same proportion as a year, so a few months of exchange daily bars
   do not count the weekend missing after their last bar.
3. **Under a week**: the gaps between bars (bars - 1) per day spanned, times 365; such a
   short file cannot show its weekends, so it counts as a market that never closes.

A figure of 1 or more is rounded to a whole number of bars. Fewer than 2 distinct
timestamps: NaN (no rate to count).

``basket_bars_per_year(arrays)`` applies the same rule to the union of several
instruments' timestamps: a basket's per-bar returns have a bar wherever any instrument has one.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

__all__ = ["bars_per_year", "basket_bars_per_year"]

DAYS_PER_YEAR = 365.0
_DAY = np.timedelta64(86_400_000_000_000, "ns")
_WEEK = 7 * _DAY


def bars_per_year(timestamps: np.ndarray) -> float:
    """Bars per year of the ``[n]`` timestamps (any order, datetime64 or anything numpy converts);
    the rule is in the module docstring."""
    stamps = np.unique(np.asarray(timestamps, dtype="datetime64[ns]"))  # sorted, distinct
    if stamps.size < 2:
        return float("nan")
    years, counts = np.unique(stamps.astype("datetime64[Y]"), return_counts=True)
    full, bars = years[1:-1], counts[1:-1]  # the years strictly between the first and the last
    if full.size:
        days = ((full + 1).astype("datetime64[D]") - full.astype("datetime64[D]")) / np.timedelta64(1, "D")
        return _whole(float(np.median(bars / days * DAYS_PER_YEAR)))
    span = stamps[-1] - stamps[0]
    weeks = int(span // _WEEK)
    if weeks >= 1:
        inside = int(np.searchsorted(stamps, stamps[0] + weeks * _WEEK, side="left"))  # bars of those weeks
        per_day = inside / (7.0 * weeks)
    else:
        per_day = (stamps.size - 1) / (span / _DAY)
    return _whole(per_day * DAYS_PER_YEAR)


def basket_bars_per_year(arrays: Iterable[np.ndarray]) -> float:
    """:func:`bars_per_year` of the union of several instruments' timestamp arrays."""
    parts = [np.asarray(a, dtype="datetime64[ns]").ravel() for a in arrays]
    if not parts:
        return float("nan")
    return bars_per_year(np.concatenate(parts))


def _whole(value: float) -> float:
    """``value`` rounded to a whole number of bars when 1 or more (sparser bars keep their fraction)."""
    return float(round(value)) if math.isfinite(value) and value >= 1.0 else value
