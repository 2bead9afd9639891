"""Write the worked example's two instruments (docs/data.md) from real data shipped with
gym-anytrading (pip install gym-anytrading): GOOGL daily bars (2009-05-22 to 2018-08-29,
with Adj Close) and EUR/USD hourly ask bars (2017). Each file gets one volume-based
feature column, ``vol_ratio``: log(volume / mean volume of the last 20 bars), left empty
(NaN) on the first 19 bars, where the mean is not yet defined.

    python docs/example/data/make_example_data.py   # writes GOOGL.csv and EURUSD_1H.csv here
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gym_anytrading.datasets import FOREX_EURUSD_1H_ASK, STOCKS_GOOGL

HERE = Path(__file__).resolve().parent


def with_volume_feature(frame):
    out = frame.copy()
    out["vol_ratio"] = np.log(out["Volume"] / out["Volume"].rolling(20).mean())
    return out


if __name__ == "__main__":
    with_volume_feature(STOCKS_GOOGL).to_csv(HERE / "GOOGL.csv")
    with_volume_feature(FOREX_EURUSD_1H_ASK).to_csv(HERE / "EURUSD_1H.csv")
    print(f"wrote {HERE / 'GOOGL.csv'} and {HERE / 'EURUSD_1H.csv'}")
