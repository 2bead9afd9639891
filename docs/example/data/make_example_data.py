"""Write the worked example's two instruments (docs/data.md) from real data shipped with
gym-anytrading (pip install gym-anytrading): GOOGL daily bars (2009-05-22 to 2018-08-29,
with Adj Close) and EUR/USD hourly ask bars (2017). Each file gets one volume-based
feature column, ``vol_ratio``: log(volume / mean volume of the last 20 bars), left empty
(NaN) on the first 19 bars, where the mean is not yet defined.

    python docs/example/data/make_example_data.py   # writes GOOGL.csv and EURUSD_1H.csv here
    python docs/example/data/make_example_data.py --googl STOCKS_GOOGL.csv   # without gym-anytrading

A STOCKS_GOOGL.csv you already have (gym-anytrading's file, as docs/evaluation.md copies it) is
read from ``--googl`` or, without gym-anytrading, from the current directory; EURUSD_1H.csv needs
gym-anytrading or ``--eurusd FOREX_EURUSD_1H_ASK.csv``. Without any source of GOOGL's bars the
script prints one line with the fix on stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
FIX = ("pip install gym-anytrading, or give --googl STOCKS_GOOGL.csv "
       "(and --eurusd FOREX_EURUSD_1H_ASK.csv)")


def with_volume_feature(frame):
    out = frame.copy()
    out["vol_ratio"] = np.log(out["Volume"] / out["Volume"].rolling(20).mean())
    return out


def _gym_datasets():
    try:
        from gym_anytrading import datasets
    except ImportError:
        return None
    return datasets


def _source(given: Path | None, name: str, local: str, index: str):
    """The frame of ``given``, else gym-anytrading's ``name``, else ``./local``; None if none."""
    if given is not None:
        return pd.read_csv(given, index_col=index)
    datasets = _gym_datasets()
    if datasets is not None:
        return getattr(datasets, name)
    if Path(local).is_file():
        return pd.read_csv(local, index_col=index)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/example/data/GOOGL.csv and EURUSD_1H.csv.")
    parser.add_argument("--googl", type=Path, help="a STOCKS_GOOGL.csv (default: gym-anytrading's, else ./STOCKS_GOOGL.csv)")
    parser.add_argument("--eurusd", type=Path, help="a FOREX_EURUSD_1H_ASK.csv (default: gym-anytrading's, "
                                                     "else ./FOREX_EURUSD_1H_ASK.csv)")
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: this folder)")
    args = parser.parse_args(argv)
    for path in (args.googl, args.eurusd):
        if path is not None and not path.is_file():
            print(f"make_example_data.py: no file {path}", file=sys.stderr)
            return 2
    googl = _source(args.googl, "STOCKS_GOOGL", "STOCKS_GOOGL.csv", "Date")
    if googl is None:
        print(f"make_example_data.py: GOOGL's bars come from gym-anytrading, which is not installed: {FIX}",
              file=sys.stderr)
        return 2
    eurusd = _source(args.eurusd, "FOREX_EURUSD_1H_ASK", "FOREX_EURUSD_1H_ASK.csv", "Time")
    args.out.mkdir(parents=True, exist_ok=True)
    with_volume_feature(googl).to_csv(args.out / "GOOGL.csv")
    if eurusd is None:
        print(f"wrote {args.out / 'GOOGL.csv'}; EURUSD_1H.csv needs gym-anytrading or --eurusd "
              "FOREX_EURUSD_1H_ASK.csv (docs/data.md's two-instrument example reads it)", file=sys.stderr)
        return 0
    with_volume_feature(eurusd).to_csv(args.out / "EURUSD_1H.csv")
    print(f"wrote {args.out / 'GOOGL.csv'} and {args.out / 'EURUSD_1H.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
