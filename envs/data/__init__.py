"""Market data: historical OHLCV files loaded, checked and turned into env inputs.

- ``loading.py``: ``load_ohlcv`` (a CSV, CSV.gz or Parquet file or a DataFrame to ``MarketData``),
  sorting and checking the bars, ``date_span`` (date ranges);
- ``market_data.py``: ``MarketData``, the validated bars (without pandas);
- ``plain_csv.py``: ``read_plain_csv``, a plain OHLCV CSV file read without pandas, or None for the loader;
- ``columns.py``: which column is the time, each price, the volume and each ``--features`` column;
- ``timestamps.py``: the time column's values to timestamps (formats, day-first, epochs);
- ``checks.py``: the price checks and the Adj Close adjustment;
- ``calendar.py``: bars per year, counted from the bars' own timestamps (``MarketData.periods_per_year``);
- ``errors.py``: ``DataError`` and the file/row context of every message;
- ``features.py``: ``--features``, the causal rolling z-score of each named column;
- ``instruments.py``: ``--data`` paths (files or directories) to one data file per instrument.

``MarketData``, ``DataError``, ``load_ohlcv`` and ``date_span`` are importable from
``envs.data`` itself; they come from their modules on first use (``MarketData`` and
``DataError`` without pandas; ``load_ohlcv`` and ``date_span`` from ``loading.py``, with it),
so the env (which needs only ``features.py``) and the ONNX inference route do not import pandas.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envs.data.loading import DataError, MarketData, date_span, load_ohlcv

__all__ = ["DataError", "MarketData", "load_ohlcv", "date_span"]


def __getattr__(name: str) -> Any:
    """Lazy access to the loader's public names (``envs.data.loading``)."""
    if name == "MarketData":
        from envs.data.market_data import MarketData

        return MarketData
    if name == "DataError":
        from envs.data.errors import DataError

        return DataError
    if name in __all__:
        from envs.data import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'envs.data' has no attribute {name!r}")
