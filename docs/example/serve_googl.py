"""Open a session on GOOGL's history but its last bar, then post that bar and print the answer.

Run from the directory of the serving example (docs/serving.md), while serve-ppo-lstm runs there.
"""
import json

import httpx
import pandas as pd

client = httpx.Client(base_url="http://127.0.0.1:8000", timeout=60.0,
                      headers={"Authorization": "Bearer " + open("serve.token").read().strip()})


def as_bar(row) -> dict:
    return {"time": str(row.Date), "open": row.Open, "high": row.High, "low": row.Low, "close": row.Close,
            "volume": float(row.Volume)}


bars = [as_bar(r) for r in pd.read_csv("STOCKS_GOOGL.csv").itertuples()]
client.post("/sessions/googl", json={"bars": bars[:-1], "start": "2017-09-01"}).raise_for_status()
answer = client.post("/sessions/googl/bars", json=bars[-1])
answer.raise_for_status()
print(json.dumps(answer.json(), indent=1))
