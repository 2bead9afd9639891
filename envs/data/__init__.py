"""Market data: loading OHLCV files and their feature columns.

``MarketData``, ``DataError``, ``load_ohlcv`` and ``date_span`` are imported from
``envs.data.loading`` on first use, so importing the env does not import pandas.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envs.data.loading import DataError, MarketData, date_span, load_ohlcv

__all__ = ["DataError", "MarketData", "load_ohlcv", "date_span"]


def __getattr__(name: str) -> Any:
    """Lazy access to the loader's public names (``envs.data.loading``)."""
    if name in __all__:
        from envs.data import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'envs.data' has no attribute {name!r}")
