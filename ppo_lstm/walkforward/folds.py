"""The folds: K consecutive test windows at the end of the selected bars, and the bars
each fold trains on (everything before its test window less ``--purge`` bars, from the
first bar or a ``--train-size`` window before it).

Folds are cut on the calendar of the selected bars (``times`` ``[N]``, sorted, unique:
with several instruments, the union of their stamps), so one fold is one span of time
for every instrument. A size is a count of bars (``250``) or a duration (``1y``, ``6mo``,
``4w``, ``10d``, ``12h``, ``30min``): a duration's window holds the bars whose stamps fall
in it, counted back from the last bar.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

import numpy as np
import pandas as pd

from ..errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(y|mo|w|d|h|min)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Duration:
    """A duration as the user wrote it (``text``, e.g. ``1y``) and its value (``offset``)."""

    text: str
    offset: Union[pd.DateOffset, pd.Timedelta]

    def __str__(self) -> str:
        return self.text


Size = Union[int, Duration, pd.DateOffset, pd.Timedelta]


@dataclass(frozen=True)
class Fold:
    """Fold ``k`` (1-based) as bar indices of the calendar: training bars ``train_lo..train_hi-1``
    (the job's inner hold-out is their last fraction), test bars ``test_lo..test_hi-1``."""

    k: int
    train_lo: int
    train_hi: int
    test_lo: int
    test_hi: int


def parse_size(text: str, flag: str) -> Size:
    """``250`` -> 250 bars; ``1y`` / ``6mo`` -> a :class:`Duration` of a calendar offset; ``4w`` / ``10d`` /
    ``12h`` / ``30min`` -> one of a Timedelta (the text kept for messages). UsageError (one line) otherwise."""
    text = str(text).strip()
    if text.isdigit():
        if int(text) < 1:
            raise UsageError(f"{flag} must be at least 1 bar, got {text}")
        return int(text)
    found = _DURATION.match(text)
    if not found:
        raise UsageError(f"{flag} {text!r} is neither a count of bars (e.g. 250) nor a duration (e.g. 1y, 6mo, "
                         f"4w, 10d, 12h, 30min)")
    amount, unit = float(found.group(1)), found.group(2).lower()
    if amount <= 0:
        raise UsageError(f"{flag} must be a positive duration, got {text}")
    if unit in ("y", "mo"):
        months = amount * (12 if unit == "y" else 1)
        if months != int(months):
            raise UsageError(f"{flag} {text!r}: give years or months as a whole number of months (e.g. 18mo)")
        return Duration(text, pd.DateOffset(months=int(months)))
    return Duration(text, pd.Timedelta(amount, {"w": "W", "d": "D", "h": "h", "min": "min"}[unit]))


def _back(times: np.ndarray, end: int, size: Size) -> int:
    """The first bar of the window of ``size`` that ends with bar ``end - 1``."""
    if isinstance(size, int):
        return end - size
    if end <= 0:
        return end
    cut = pd.Timestamp(times[end - 1]) - (size.offset if isinstance(size, Duration) else size)
    return int(np.searchsorted(times, cut.to_datetime64(), side="right"))


def make_folds(times: np.ndarray, folds: int, test_size: Size, purge: int,
               train_size: Union[Size, None]) -> list[Fold]:
    """The folds, oldest first, over the calendar ``times`` ``[N]``. UsageError (one line,
    with the numbers) when the bars do not hold them."""
    n = len(times)
    edges = [n]
    for _ in range(folds):
        edges.append(_back(times, edges[-1], test_size))
    edges.reverse()  # edges[0] is fold 1's first test bar
    first_train_hi = edges[0] - purge
    if edges[0] < 1 or first_train_hi < 1 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise UsageError(f"{folds} folds of --test-size {_show(test_size)} after --purge {purge} need more bars than "
                         f"the {n} selected ({_day(times[0])} to {_day(times[-1])}); fold 1 would start at bar "
                         f"{edges[0]} and leave {max(0, first_train_hi)} to train on; use fewer --folds, a shorter "
                         f"--test-size, or more data")
    out = []
    for k in range(folds):
        lo, hi = edges[k], edges[k + 1]
        train_hi = lo - purge
        train_lo = 0 if train_size is None else max(0, _back(times, train_hi, train_size))
        out.append(Fold(k + 1, train_lo, train_hi, lo, hi))
    return out


def _show(size: Size) -> str:
    """A size as the flag took it: ``150 bars``, or a :class:`Duration`'s own text (``1y``)."""
    if isinstance(size, int):
        return f"{size} bars"
    return str(size)


def _day(stamp: object) -> str:
    return str(pd.Timestamp(stamp))
