"""Helpers of the OHLCV loader tests (``test_data.py``, ``test_data_errors.py``): small files and
the one-line ``DataError`` check."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from envs.data import DataError, load_ohlcv

HEADER = "Date,Open,High,Low,Close,Volume\n"
ROWS = [
    "2017-01-02,10,11,9,10.5,100",
    "2017-01-03,10.5,12,10,11.5,200",
    "2017-01-04,11.5,12.5,11,12,300",
]


def write(tmp_path: Path, text: str, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def csv(tmp_path: Path, rows: list[str] = ROWS, header: str = HEADER, name: str = "data.csv") -> Path:
    return write(tmp_path, header + "\n".join(rows) + "\n", name)


def error(path: Path, **kwargs) -> str:
    """Load, expect DataError, check the message is one line naming the file, and return it."""
    with pytest.raises(DataError) as info:
        load_ohlcv(path, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg and "\r" not in msg
    assert str(path) in msg
    return msg


def days(*stamps: str) -> np.ndarray:
    return np.array(stamps, dtype="datetime64[ns]")



def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Date": pd.to_datetime(["2017-01-04", "2017-01-02", "2017-01-03"]),
            "Open": [11.5, 10, 10.5],
            "High": [12.5, 11, 12],
            "Low": [11, 9, 10],
            "Close": [12, 10.5, 11.5],
        }
    )
