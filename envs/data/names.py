"""The column names of each role in an OHLCV table (``_PRICE_ALIASES``, ``_ADJ_CLOSE``, ``_VOLUME``,
``_TIME_NAMES``) and how names are compared (``_norm``), without pandas: ``columns.py`` (the loader) and
``plain_csv.py`` read them."""
from __future__ import annotations

import re

_PRICE_ALIASES: dict[str, tuple[str, ...]] = {
    "open": ("open", "o", "openprice"),
    "high": ("high", "h", "highprice"),
    "low": ("low", "l", "lowprice"),
    "close": ("close", "c", "closeprice"),
}
_ADJ_CLOSE = ("adjclose", "adjustedclose", "adjclosing")  # Adj Close; scales Open/High/Low when Close is there too
_VOLUME = ("volume", "vol", "v")
_TIME_NAMES = (
    "datetime", "timestamp", "date", "time", "gmttime", "utctime", "localtime", "datetimeutc",
    "dateutc", "timeutc", "opentime", "unix", "unixtime", "epoch", "ts", "dt",
)


def _norm(name: object) -> str:
    """Normalised column name: lower case without spaces, underscores, dashes or dots."""
    return re.sub(r"[\s_\-.]+", "", str(name).lower())
