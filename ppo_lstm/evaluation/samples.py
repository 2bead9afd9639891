"""Which of a backtest's bars the run read, to train and to choose ``best.pt``: the report's labels.

A checkpoint of a run on ``--data`` records, per instrument (``ppo_lstm.train.data_fingerprint``),
``train_first`` / ``train_last``, the first and last bar training episodes may read, and
``last``, the last bar the run selected. The bars after ``train_last`` up to ``last`` are the
run's hold-out: every checkpoint was backtested on them and the best became ``best.pt``. So
each scored bar of a backtest is one of:

* **training** (``train_first`` to ``train_last``): in sample;
* **selection hold-out** (after ``train_last``, up to ``last``): they chose ``best.pt``, so a
  score on them is not out of sample, for ``best.pt`` or for any checkpoint of the run;
* **out of sample** (after ``last``): later than every bar training and selection read;
* **earlier** (before ``train_first``): read by neither, but no later than what training read,
  so not a test on later data either.

The labels are given only where the backtest's file holds the very bars the fingerprint
records for its instrument (:func:`training_entry`: the same times, prices and feature values,
by their SHA-256); on any other file no bar is labelled, and the report says once that these
are not the bars training read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ..data_split import bars_sha256

if TYPE_CHECKING:
    from envs.data import MarketData


@dataclass(frozen=True)
class SampleSplit:
    """How many of a backtest's ``T`` scored bars are of each kind (module docstring), and the
    stamps that separate them (ISO): ``training_period`` (first and last training bar) and
    ``last_read`` (the last bar training and selection read; the last training bar without a hold-out)."""

    earlier: int
    training: int
    holdout: int
    out_of_sample: int
    training_period: tuple[str, str]
    last_read: str

    @property
    def bars(self) -> int:
        """T, the bars scored."""
        return self.earlier + self.training + self.holdout + self.out_of_sample

    def as_dict(self) -> dict[str, Any]:
        """The JSON ``sample`` object: the four counts and ``last_read``."""
        return {"earlier": self.earlier, "training": self.training, "selection_holdout": self.holdout,
                "out_of_sample": self.out_of_sample, "last_read": self.last_read}

    def lines(self) -> list[str]:
        """One report line per kind of bar present."""
        first, last = (_short(s) for s in self.training_period)
        read = _short(self.last_read)
        kinds = ((self.earlier, f"earlier than the training bars (before {first}): read by neither training nor "
                                f"selection, but not later data either, so not out of sample"),
                 (self.training, f"training bars ({first} to {last}): in sample"),
                 (self.holdout, f"the selection hold-out (after {last} up to {read}): they chose best.pt, so they "
                                f"are not out of sample"),
                 (self.out_of_sample, f"out of sample: after {read}, the last bar training and selection read"))
        count = (lambda n: f"all {n} bars are") if any(n == self.bars for n, _ in kinds) else \
            (lambda n: f"{n} of the {self.bars} bars {'is' if n == 1 else 'are'}")
        return [f"{count(n)} {text}" for n, text in kinds if n]


def training_entry(data: MarketData, trained_on: list[dict], name: str) -> tuple[Optional[dict], str]:
    """The fingerprint's entry of instrument ``name`` when ``data`` holds exactly the bars it records
    (from its ``first`` bar on, ``bars`` of them, of the same SHA-256; a file that grew since still
    does), else None and why not."""
    own = [e for e in trained_on if e.get("name") == name]
    if not own:
        names = ", ".join(str(e.get("name")) for e in trained_on)
        return None, f"the checkpoint's run trained on {names}, not on {name}"
    entry = own[0]
    try:
        stamps = np.asarray(data.timestamps).astype("datetime64[ns]")
        lo = int(np.searchsorted(stamps, np.datetime64(entry["first"], "ns")))
        bars = int(entry["bars"])
    except (KeyError, TypeError, ValueError):
        return None, "the checkpoint's record of its training data is unreadable"
    if lo + bars > len(stamps) or bars_sha256(data, lo, lo + bars) != entry.get("sha256"):
        return None, (f"{name} does not hold the bars the checkpoint's run read ({bars} bars from "
                      f"{_short(str(entry['first']))}): another file of the same name, or one edited since")
    return entry, ""


def split_bars(times: np.ndarray, trained_on: Optional[list[dict]], name: str) -> Optional[SampleSplit]:
    """The :class:`SampleSplit` of the scored bars stamped ``times [T]`` under the checkpoint's
    fingerprint ``trained_on`` (instrument ``name``'s entry, else all); None when it records none."""
    if not trained_on:
        return None
    import pandas as pd  # imported here, with the data: a run on a simulated market never loads pandas

    own = [e for e in trained_on if e.get("name") == name] or trained_on
    try:
        first = min(pd.Timestamp(e["train_first"]) for e in own)
        last = max(pd.Timestamp(e["train_last"]) for e in own)
        read = max(max(pd.Timestamp(e["last"]) for e in own), last)
    except (KeyError, TypeError, ValueError):
        return None
    stamps = pd.DatetimeIndex(times)
    earlier = int((stamps < first).sum())
    training = int(((stamps >= first) & (stamps <= last)).sum())
    holdout = int(((stamps > last) & (stamps <= read)).sum())
    return SampleSplit(earlier, training, holdout, len(stamps) - earlier - training - holdout,
                       (first.isoformat(), last.isoformat()), read.isoformat())


def _short(stamp: str) -> str:
    """An ISO stamp, without a midnight time (a daily bar's date)."""
    return stamp[:10] if stamp.endswith("T00:00:00") else stamp
