"""``--time-limit DURATION``: a wall-clock budget for one training invocation.

The budget counts from the trainer's start (after start-up and any resume). When any rank's
clock passes it, every rank learns so in the iteration's one collective
(:mod:`ppo_lstm.train.agreement`) and the run ends at that update as it ends at its last one:
a hold-out backtest, a checkpoint and the summary, exit code 0. ``--resume`` goes on from there.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import pandas as pd

from ..errors import UsageError


def limit_seconds(text: Optional[str]) -> Optional[float]:
    """Seconds of ``text``: a number of seconds (``600``) or a duration pandas reads (``90s``,
    ``10min``, ``1h30m``, ``2 hours``); None for None. UsageError (one line) for anything else."""
    if text is None:
        return None
    words = str(text).strip()
    try:
        seconds = float(words)
    except ValueError:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pandas warns of some deprecated unit spellings
                seconds = pd.Timedelta(words).total_seconds()
        except (ValueError, TypeError):
            seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--time-limit takes a positive duration such as 90s, 10min or 1h30m (a bare number is "
                         f"seconds), got {text!r}")
    return seconds
