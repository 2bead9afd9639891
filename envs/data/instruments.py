"""Several instruments: ``--data`` paths (files or directories of files) to one data file per
instrument, loaded with the same rules.

A directory stands for the data files directly inside it (``.csv``, ``.csv.gz``,
``.parquet``, ``.pq``; sorted by name; sub-directories are not searched). Each file is
one instrument, named by its file name (``prices/AAPL.csv`` -> ``AAPL.csv``); two files
with the same name are refused, since reports are keyed by it.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from envs.data.errors import DataError

if TYPE_CHECKING:
    from envs.data.loading import MarketData

DATA_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")


def data_paths(paths: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str]:
    """The data files that ``paths`` name, in order (directories expanded). DataError (one line)
    for a directory without data files or two instruments with the same file name."""
    if paths is None:
        return []
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[str] = []
    for path in map(os.fspath, given):
        if os.path.isdir(path):
            inside = sorted(name for name in os.listdir(path)
                            if name.lower().endswith(DATA_SUFFIXES) and os.path.isfile(os.path.join(path, name)))
            if not inside:
                raise DataError(f"{path}: directory holds no data files ({', '.join(DATA_SUFFIXES)}); "
                                f"pass files or a directory of them")
            files += [os.path.join(path, name) for name in inside]
        else:
            files.append(path)  # load_ohlcv reports a missing or unreadable file
    seen: dict[str, str] = {}
    for path in files:
        name = os.path.basename(path)
        if name in seen:
            raise DataError(f"{seen[name]} and {path} are both instrument {name!r} (an instrument is named by its "
                            f"file name); rename one of them")
        seen[name] = path
    return files


def instrument_name(path: str | os.PathLike) -> str:
    """An instrument's name in reports: its file name."""
    return os.path.basename(os.fspath(path))


def load_instruments(paths: str | os.PathLike | Sequence[str | os.PathLike], date_format: str | None = None,
                     min_rows: int = 2, features: Sequence[str] = ()) -> list[MarketData]:
    """Every instrument of ``paths`` loaded by :func:`envs.data.load_ohlcv` (DataError, one line,
    naming the file, for the first that fails)."""
    from envs.data.loading import load_ohlcv  # pandas: imported when a file is read, not at start-up

    return [load_ohlcv(path, date_format, min_rows=min_rows, features=features) for path in data_paths(paths)]
