"""The bars a tuning study read, and the check that no walk-forward test window lies among them.

A span is ``START..END``: the stamps of the first and the last bar a study's trials read (their
training bars and their hold-out; with several instruments, the earliest first bar and the latest
last bar), ISO 8601. An END without a time of day covers that whole day, as ``--data-end`` does.
``tune-ppo-lstm`` records it in the study and in ``best.yaml`` (key ``tuned-span``).

The study chose its settings on those bars, so a test window among them is not out of sample:
:func:`check_test_windows` refuses it (one line naming both spans and the ``--data-start`` that
fixes it). Stamps are compared as times, whatever the instrument: markets move together.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from envs.data import MarketData

from ..errors import UsageError
from .folds import Fold

SEPARATOR = ".."
_DATE_ONLY = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")


@dataclass(frozen=True)
class TunedSpan:
    """The first and last bar a study read (``end`` inclusive), and where the span came from
    (``"tuned-span"``, ``"--study runs/tune:tune"``), for messages."""

    start: pd.Timestamp
    end: pd.Timestamp
    source: str


def span_text(first: Any, last: Any) -> str:
    """``START..END`` of two bar stamps, each as full ISO 8601 (``2010-01-04T00:00:00``)."""
    return f"{pd.Timestamp(first).isoformat()}{SEPARATOR}{pd.Timestamp(last).isoformat()}"


def _stamp(text: str, end: bool) -> pd.Timestamp:
    stamp = pd.Timestamp(text.strip())
    if stamp.tzinfo is not None:  # the files' stamps are UTC without a zone
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    if end and _DATE_ONLY.match(text):
        stamp = stamp + pd.Timedelta(days=1) - pd.Timedelta(1, "ns")
    return stamp


def parse_span(text: str, source: str) -> TunedSpan:
    """``START..END`` as a :class:`TunedSpan`; UsageError (one line) when it is not one."""
    start, sep, end = str(text).partition(SEPARATOR)
    try:
        if not sep or not start.strip() or not end.strip():
            raise ValueError(text)
        span = TunedSpan(_stamp(start, False), _stamp(end, True), source)
    except ValueError:
        raise UsageError(f"{source} {text!r}: give START..END, the first and last bar the study read, e.g. "
                         f"2010-01-04..2022-12-30") from None
    if span.start > span.end:
        raise UsageError(f"{source} {text!r}: START is after END; swap them")
    return span


def show(stamp: Any) -> str:
    """A stamp as a date when it is midnight (daily bars) or a whole day's end, else with its time of day."""
    stamp = pd.Timestamp(stamp)
    if stamp == stamp.normalize():
        return stamp.date().isoformat()
    day_end = stamp + pd.Timedelta(1, "ns")
    return stamp.date().isoformat() if day_end == day_end.normalize() else stamp.isoformat(sep=" ")


def first_bar_after(datas: Sequence[MarketData], stamp: pd.Timestamp) -> Optional[pd.Timestamp]:
    """The first bar of any instrument after ``stamp`` (None when the data ends by then)."""
    later = [d.timestamps[np.searchsorted(d.timestamps, stamp.to_datetime64(), side="right"):] for d in datas]
    later = [t[0] for t in later if len(t)]
    return pd.Timestamp(min(later)) if later else None


def check_test_windows(span: TunedSpan, folds: Sequence[Fold], calendar: np.ndarray,
                       datas: Sequence[MarketData], data_end: Optional[str]) -> None:
    """UsageError (one line) when a fold's test window ``calendar [N]`` bars overlaps ``span``."""
    for fold in folds:
        first, last = pd.Timestamp(calendar[fold.test_lo]), pd.Timestamp(calendar[fold.test_hi - 1])
        if first > span.end or last < span.start:
            continue
        after = first_bar_after(datas, span.end)
        if after is None:
            fix = "the data holds no bar after them; walk forward on a file that goes on past them"
        else:
            fix = (f"walk forward on later bars: --data-start {show(after)}"
                   + (" (and a --data-end after it)" if _ends_before(data_end, after) else "")
                   + ", or test fewer or shorter windows (--folds, --test-size)")
        raise UsageError(f"fold {fold.k}'s test window {show(first)}..{show(last)} overlaps the bars the study "
                         f"tuned on ({show(span.start)}..{show(span.end)}, from {span.source}), so it is not out of "
                         f"sample; every test window must start after {show(span.end)}: {fix}")


def _ends_before(data_end: Optional[str], stamp: pd.Timestamp) -> bool:
    """Whether ``--data-end`` (None: the file's end) selects no bar at or after ``stamp``."""
    if data_end is None:
        return False
    try:
        return _stamp(data_end, True) < stamp
    except ValueError:
        return True
