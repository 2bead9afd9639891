"""Error reporting shared by the OHLCV loader modules: ``DataError`` and where a problem is.

``_Ctx`` carries the file name and how to describe a row and builds the
one-line ``DataError`` every check raises; ``_show`` and ``_more`` format the
offending value and the count of other such rows. This is the bottom of the
loader's imports: ``loading``, ``columns``, ``timestamps`` and ``checks`` (all in ``envs.data``)
use it, and it uses none of them.

Row numbers in messages
    "row N" is the 1-based data row in the file's original order (before
    sorting). For CSV the message adds "line N+1", the line in the file for a
    one-line header and no blank lines (pandas skips blank lines, so each blank
    line above the row shifts the real line down by one).
"""
from __future__ import annotations

import numpy as np


class DataError(ValueError):
    """A problem with a data file. str(err) is ONE line: what is wrong, where (file, column, row), and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class _Ctx:
    """Where we are: file name and how to describe a row."""

    def __init__(self, source: str, is_csv: bool) -> None:
        self.source = source
        self.is_csv = is_csv

    def row(self, i: int) -> str:
        """Describe 0-based data index ``i`` in the user's terms."""
        return f"row {i + 1} (line {i + 2})" if self.is_csv else f"row {i + 1}"

    def fail(self, message: str) -> DataError:
        return DataError(f"{self.source}: {message}")


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _more(mask: np.ndarray) -> str:
    extra = int(np.count_nonzero(mask)) - 1
    return f" ({extra} more such row{'s' if extra != 1 else ''})" if extra > 0 else ""
