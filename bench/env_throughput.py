"""Env-steps/s of VectorTradingEnv (N = 1, 64, 1024) vs gym-anytrading and Gym-Trading-Env.

Single core: BLAS/OpenMP threads are pinned to 1 before NumPy is imported and the
process is bound to one CPU where the OS allows. Random actions; auto-resets are
included in the timing (the competitors are reset by hand when an episode ends).
gym-anytrading (``stocks-v0``) and Gym-Trading-Env (``TradingEnv`` on a synthetic
DataFrame) are optional: a missing package prints a skip line.

    python bench/env_throughput.py [--seconds 2] [--quick]

The last rows trade one synthetic 20,000-bar file without and with four ``--features``
columns in the observation (each row's ratio to the same N without features).

Prints a table (env, N, steps/s, ratio vs gym-anytrading), then one JSON line.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        except OSError:
            pass


def _rate(step: Callable[[], int], seconds: float) -> float:
    """Env-steps per second: ``step()`` returns the env-steps it did."""
    for _ in range(3):
        step()  # warm-up
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        done += step()
    return done / elapsed


def bench_vector(n: int, seconds: float, market: str, data=None, features: str | None = None) -> float:
    from envs import VectorTradingEnv

    env = VectorTradingEnv(n, market=market, data=data, features=features)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, env.single_action_space.n, (4096, n))
    i = 0

    def step() -> int:
        nonlocal i
        env.step(actions[i & 4095])
        i += 1
        return n

    return _rate(step, seconds)


def anytrading_history():
    """gym-anytrading's own stocks-v0 data (GOOGL daily bars), read by our loader, or None."""
    try:
        from gym_anytrading.datasets import STOCKS_GOOGL
    except ImportError:
        return None
    import tempfile

    from envs.data import load_ohlcv

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "googl.csv")
        STOCKS_GOOGL.to_csv(path)
        return load_ohlcv(path)


FEATURES = "f1,f2,f3,f4"


def feature_history(bars: int = 20_000):
    """A synthetic hourly random walk with four feature columns (``FEATURES``), read by our loader."""
    import tempfile

    import pandas as pd

    from envs.data import load_ohlcv

    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    open_ = np.r_[100.0, close[:-1]]
    frame = pd.DataFrame({"Date": pd.date_range("2020-01-01", periods=bars, freq="h"), "Open": open_,
                          "High": np.maximum(open_, close), "Low": np.minimum(open_, close), "Close": close,
                          **{name: rng.standard_normal(bars) for name in FEATURES.split(",")}})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "features.csv")
        frame.to_csv(path, index=False)
        return load_ohlcv(path, features=FEATURES.split(","))


def _bench_single(env, seconds: float) -> float:
    env.reset(seed=0)
    env.action_space.seed(0)
    sample = env.action_space.sample

    def step() -> int:
        for _ in range(100):
            _, _, term, trunc, _ = env.step(sample())
            if term or trunc:
                env.reset()
        return 100

    return _rate(step, seconds)


def bench_anytrading(seconds: float) -> float | None:
    try:
        import gym_anytrading  # noqa: F401
    except ImportError:
        print("skip gym-anytrading: not installed (pip install gym-anytrading)")
        return None
    import gymnasium

    return _bench_single(gymnasium.make("stocks-v0", disable_env_checker=True), seconds)


def bench_gym_trading_env(seconds: float) -> float | None:
    try:
        import gym_trading_env  # noqa: F401
    except ImportError:
        print("skip Gym-Trading-Env: not installed (pip install gym-trading-env)")
        return None
    import gymnasium
    import pandas as pd

    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(5000)))
    df = pd.DataFrame(
        {"open": close, "high": close * 1.001, "low": close * 0.999, "close": close, "volume": 1000.0},
        index=pd.date_range("2020-01-01", periods=len(close), freq="h"),
    )
    df["feature_close"] = df["close"].pct_change().fillna(0.0)
    env = gymnasium.make(
        "TradingEnv", df=df, positions=[-1, 0, 1], trading_fees=0.0001, max_episode_duration=128,
        verbose=0, disable_env_checker=True,
    )
    return _bench_single(env, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--quick", action="store_true", help="0.3 s per measurement")
    parser.add_argument("--market", default="mixed", help="simulated market of VectorTradingEnv")
    args = parser.parse_args()
    seconds = 0.3 if args.quick else args.seconds
    _pin_one_core()
    warnings.filterwarnings("ignore")

    rows: list[tuple[str, int, float | None]] = []
    anytrading = bench_anytrading(seconds)
    rows.append(("gym-anytrading stocks-v0", 1, anytrading))
    rows.append(("Gym-Trading-Env TradingEnv", 1, bench_gym_trading_env(seconds)))
    for n in (1, 64, 1024):
        rows.append((f"VectorTradingEnv ({args.market})", n, bench_vector(n, seconds, args.market)))
    history = anytrading_history()  # the same bars stocks-v0 trades: no simulation cost at resets
    for n in (1, 64, 1024):
        rows.append(("VectorTradingEnv (stocks-v0 data)", n,
                     None if history is None else bench_vector(n, seconds, args.market, history)))

    featured = feature_history()  # the same bars without and with 4 feature columns in the observation
    plain_rates: dict[int, float] = {}
    for n in (1, 64, 1024):
        plain_rates[n] = bench_vector(n, seconds, args.market, featured)
        rows.append(("VectorTradingEnv (file, no features)", n, plain_rates[n]))
        rate = bench_vector(n, seconds, args.market, featured, FEATURES)
        rows.append(("VectorTradingEnv (file, 4 features)", n, rate))

    print(f"{'env':38s} {'N':>5s} {'steps/s':>12s} {'vs anytrading':>14s} {'vs no features':>15s}")
    for name, n, rate in rows:
        if rate is None:
            print(f"{name:38s} {n:5d} {'skipped':>12s} {'-':>14s}")
            continue
        ratio = f"{rate / anytrading:.1f}x" if anytrading else "-"
        versus = f"{rate / plain_rates[n]:.2f}x" if "4 features" in name else ""
        print(f"{name:38s} {n:5d} {rate:12,.0f} {ratio:>14s} {versus:>15s}")
    record = {
        "seconds": seconds,
        "market": args.market,
        "features_vs_none": {n: round(r / plain_rates[n], 3) for name, n, r in rows if "4 features" in name},
        "results": [
            {"env": name, "num_envs": n, "steps_per_s": None if rate is None else round(rate, 1),
             "ratio_vs_anytrading": None if rate is None or not anytrading else round(rate / anytrading, 2)}
            for name, n, rate in rows
        ],
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
