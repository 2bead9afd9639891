"""A config file's values, typed as their flags would type them (:mod:`ppo_lstm.config.files`), and
durations (``--time-limit``, ``--train-for``) in seconds.

:func:`convert` turns one value of a YAML or TOML file into what its argparse option would
give: through the option's ``type`` and ``choices``, a switch's ``true``/``false``, and a
multi-value option's list of exactly as many values as the flag takes. Every bad value
raises :class:`UsageError` with one line naming the file, line and key (``where``).
"""
from __future__ import annotations

import argparse
import datetime
import math
import warnings
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError


def _is_paired_switch(action: argparse.Action) -> bool:
    return isinstance(action, argparse.BooleanOptionalAction)


def convert(action: argparse.Action, key: Any, value: Any, where: str) -> Any:
    """``value`` as the flag would give it: through the option's ``type`` and ``choices``."""
    if action.nargs == 0:  # a switch
        if not isinstance(value, bool):
            raise UsageError(f"{where}: '{key}' takes true or false, got {_shown(value)}")
        return value if _is_paired_switch(action) else (action.const if value else not action.const)
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        if value is None:
            return _convert_one(action, key, value, where)  # null: the default, where that is none
        items = value if isinstance(value, list) else [value]
        if action.nargs == "+" and not items:
            raise UsageError(f"{where}: '{key}' needs at least one value")
        if isinstance(action.nargs, int) and (not isinstance(value, list) or len(items) != action.nargs):
            names = action.metavar if isinstance(action.metavar, tuple) else ()
            what = f" ({', '.join(names)})" if names else ""
            got = f"a list of {len(items)}" if isinstance(value, list) else _shown(value)
            raise UsageError(f"{where}: '{key}' takes a list of {action.nargs} values{what}, as its flag takes "
                             f"{action.nargs}, got {got}")
        return [_convert_one(action, key, item, where) for item in items]
    return _convert_one(action, key, value, where)


def _convert_one(action: argparse.Action, key: Any, value: Any, where: str) -> Any:
    if value is None:
        if action.default is None:
            return None
        if getattr(action, "null_value", None) is not None:  # ema-spans: null, as older versions wrote it
            return action.null_value
        raise UsageError(f"{where}: '{key}' needs a value (leave the key out for its default, "
                         f"{show(action.default)})")
    expected = _expected(action)
    if isinstance(value, bool):  # YAML reads an unquoted yes/no/on/off as true/false
        raise UsageError(f"{where}: '{key}' takes {expected}, got {_shown(value)} (quote a value such as "
                         f"'off' or 'no' in YAML)")
    if isinstance(value, (dict, list)):
        raise UsageError(f"{where}: '{key}' takes {expected}, got {_shown(value)}")
    text = value.isoformat() if isinstance(value, (datetime.date, datetime.time)) else str(value)
    try:
        converted = action.type(text) if callable(action.type) else text
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        raise UsageError(f"{where}: '{key}' takes {expected}, got {_shown(value)}") from None
    if action.choices is not None and converted not in action.choices:
        raise UsageError(f"{where}: '{key}' takes {expected}, got {_shown(value)}")
    return converted


def _expected(action: argparse.Action) -> str:
    if action.choices is not None:
        return "one of " + ", ".join(map(str, action.choices))
    return {int: "an integer", float: "a number", Path: "a path"}.get(action.type, "text (quote it)")


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"the {type(value).__name__} {value!r}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return _kind_of(value)
    return repr(value) if isinstance(value, str) else str(value)


def show(value: Any) -> str:
    """A setting's value as the start-up lines print it (``none`` for None, ``true``/``false``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


def limit_seconds(text: Optional[str], flag: str = "--time-limit") -> Optional[float]:
    """Seconds of ``text``: a number of seconds (``600``) or a duration pandas reads (``90s``,
    ``10min``, ``1h30m``, ``2 hours``); None for None. UsageError (one line, naming ``flag``)
    for anything else."""
    if text is None:
        return None
    words = str(text).strip()
    try:
        seconds = float(words)
    except ValueError:
        import pandas as pd  # here, not at the top: most runs start without a duration to read

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pandas warns of some deprecated unit spellings
                seconds = pd.Timedelta(words).total_seconds()
        except (ValueError, TypeError):
            seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{flag} takes a positive duration such as 90s, 10min or 1h30m (a bare number is "
                         f"seconds), got {text!r}")
    return seconds
