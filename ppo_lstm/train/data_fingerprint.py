"""The fingerprint of a run's training data, kept in every checkpoint, and the ``--resume`` check on it.

A checkpoint of a run on ``--data`` holds, under ``"data"``, one entry per instrument:
``name`` (its file name), ``bars`` (the bars ``--data-start`` / ``--data-end`` select),
``first`` and ``last`` (their first and last time, ISO), ``sha256`` (of those bars'
times, OHLCV and feature values), and ``train_first`` / ``train_last`` (the first and
last bar training episodes may read: the bars before the hold-out). ``evaluate-ppo-lstm``
reads the training bars to say how many of a backtest's bars were trained on.

``--resume`` compares the fingerprint of the data it finds with the checkpoint's
(:func:`check_resume_data`): a file that grew or was edited, or a directory that gained or
lost an instrument, moves the hold-out cut, so bars that chose ``best.pt`` would be
trained on. Such a resume is refused with one line, unless ``--allow-data-change``: then
``best.pt`` is chosen afresh on the new hold-out (from the resumed run's first checkpoint on)
and the envs that trade the data restart. A checkpoint written without a fingerprint (by an
older version) resumes unchecked, with one line; its fingerprint is recorded from then on.
A resume that changes ``--data``, ``--data-start``, ``--data-end`` or ``--date-format``
itself is a change of settings (``run_state``), not checked here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from envs.data.instruments import instrument_name

from ..config.schema import TrainConfig
from ..errors import UsageError
from ..evaluation.backtest import iso_stamp
from ..data_split import DataSplit, bars_sha256

if TYPE_CHECKING:
    from envs.data import MarketData

FINGERPRINT_KEY = "data"  # the checkpoint's entry
SELECTING_SETTINGS = ("data", "data_start", "data_end", "date_format")  # what picks the bars
COMPARED = ("bars", "first", "last", "sha256")


def instrument_fingerprint(data: MarketData, split: DataSplit) -> dict[str, Any]:
    """One instrument's entry (the module docstring) for its selected bars ``split.lo..split.hi-1``."""
    lo, hi = split.lo, split.hi
    times = data.timestamps
    return {"name": instrument_name(data.source), "bars": hi - lo, "first": iso_stamp(times[lo]),
            "last": iso_stamp(times[hi - 1]), "sha256": bars_sha256(data, lo, hi), "train_first": iso_stamp(times[lo]),
            "train_last": iso_stamp(times[split.split - 1])}


def data_fingerprint(datas: Optional[Sequence[MarketData]], splits: Optional[Sequence[DataSplit]]
                     ) -> Optional[list[dict[str, Any]]]:
    """The checkpoint's ``"data"`` entry: one dict per instrument; None without data."""
    if not datas or not splits:
        return None
    return [instrument_fingerprint(d, s) for d, s in zip(datas, splits)]


def _day(iso: str) -> str:
    return iso[:10] if iso.endswith("T00:00:00") else iso


def describe_change(saved: list[dict[str, Any]], now: list[dict[str, Any]]) -> Optional[str]:
    """What differs between two fingerprints, in a few words (None: the same data)."""
    before = {e.get("name"): e for e in saved}
    after = {e["name"]: e for e in now}
    parts = []
    for name, new in after.items():
        old = before.get(name)
        if old is None:
            parts.append(f"instrument {name} added")
            continue
        if all(old.get(k) == new[k] for k in COMPARED):
            continue
        what = []
        if old.get("bars") != new["bars"]:
            what.append(f"{old.get('bars')} -> {new['bars']} bars")
        if old.get("first") != new["first"]:
            what.append(f"first bar {_day(str(old.get('first')))} -> {_day(new['first'])}")
        if old.get("last") != new["last"]:
            what.append(f"last bar {_day(str(old.get('last')))} -> {_day(new['last'])}")
        parts.append(f"{name}: {', '.join(what) if what else 'the same bars and times, other values'}")
    parts += [f"instrument {name} removed" for name in before if name not in after]
    return "; ".join(parts) if parts else None


def check_resume_data(config: TrainConfig, state: dict[str, Any], now: Optional[list[dict[str, Any]]],
                      path: str) -> tuple[Optional[str], bool]:
    """The ``--resume`` check of checkpoint ``state`` (read from ``path``) against the data's
    fingerprint ``now``: (a line for the log or None, whether the data changed). Raises
    UsageError (one line) when it changed and ``config.allow_data_change`` is off."""
    if now is None:
        return None, False
    saved_config = state.get("config", {})
    if any(saved_config.get(key) != getattr(config, key) for key in SELECTING_SETTINGS):
        return None, False  # other settings select the bars: a change of settings, said as such
    saved = state.get(FINGERPRINT_KEY)
    if not isinstance(saved, list):
        return (f"note: {path} records no fingerprint of its training data (written by an older version), so a "
                f"change of the data cannot be detected on this resume; it is recorded from this run on"), False
    what = describe_change(saved, now)
    if what is None:
        return None, False
    if not config.allow_data_change:
        raise UsageError(
            f"--resume: the training data changed since {path} was written ({what}); the hold-out would move and "
            f"best.pt's score would belong to the old data. Restore the data, train afresh in another "
            f"--checkpoint-dir, or pass --allow-data-change to go on (best.pt is then chosen afresh on the new "
            f"hold-out)")
    return (f"warning: --allow-data-change: the training data changed since {path} was written ({what}); "
            f"best.pt is chosen afresh on the new hold-out from the next checkpoint on, and the environments "
            f"trading the data restart"), True
