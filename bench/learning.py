"""Learning quality at a fixed env-step budget, out of sample, beside baselines.

Trains ppo-lstm-trader (in-process, the CLI's loop; ``--seeds`` training seeds) and,
when installed, sb3-contrib's RecurrentPPO (same env, same sizes as
``bench/train_throughput.py``) on each market, then scores every policy GREEDILY on
held-out paths: ``--episodes`` fresh episodes from ``ppo_lstm.evaluation.backtest.evaluation_seeds``
(disjoint from every training seed) through ``backtest_simulated``; on the ``-csv``
market, the agent trains with ``--data`` on a long regime history and is scored on a
later, disjoint file with ``backtest_history`` (one continuous episode).

Score: mean net log return per bar, in bps (log of final over initial equity, summed
over episodes, divided by the bars), after the env's costs. Baselines trade the SAME
bars through the env's own ``TradingCore`` (fills at the next open, fee and slippage
per traded notional, K = 1 lot = the cash at the first decision):
buy-and-hold; MA crossover 10/40 (long / short); a uniformly random action per bar;
the regime oracle (holds the sign of the current bar's hidden drift); the Bayes filter
(HMM forward filter with the true p_stay 0.98, drift +-0.2 %, sigma 1 %, trading the
sign of its expected next-bar return with the hysteresis threshold that scores best on
the TRAINING paths, not the test paths); on ``ou`` the same known-model rule with the
OU's expected return (-theta x deviation from the path's start). "% Bayes" is each
score over that model rule's. Rules: ``bench/learning_baselines.py``.

    python bench/learning.py                    # the benchmark (3 markets, 3 seeds; see below for time)
    python bench/learning.py --quick            # smoke run (~1 min)
    python bench/learning.py --markets regime-10bps --steps 384000 --no-sb3   # a longer budget: 3,000 episodes of 128 steps
    python bench/learning.py --set ent_coef=0.03 --set update_interval=512    # TrainConfig overrides
    python bench/learning.py --no-sb3 --seeds 6 --workers 1,2   # 1 worker against 2 gloo workers (~9 min)

Markets: regime-1bp, regime-10bps, ou-10bps, regime-10bps-csv, signal-5bps (fee as named,
slippage 0, every other EnvConfig field at its default).

signal-5bps: the whole edge is in a column of the file (``write_signal_csv``): ``signal``
is an AR(1) (lag-1 autocorrelation 0.9, unit variance), the next bar's log return is
0.0015 x signal + 1 % noise, and ``noise`` is an independent AR(1) of the same law. The
agent trains with default flags plus ``--features signal,noise`` on a 60k-bar file and is
backtested on the 20k bars after it; beside it the same agent without ``--features``. The
reference is the known-model rule: a hysteresis band on 0.0015 x signal (long above +b,
short below -b, else hold), b tuned on the training file. Its score is the money made per
bar, in bps of the starting cash (a continuous backtest trades a fixed number of units, so
over 20k profitable bars equity grows by adding, and log growth per bar would understate
every profitable policy by a different amount); bench/results/learning_signal.txt.

Time: 12 training runs (9 x 131072 steps, 3 RecurrentPPO x 131072, the same budget) on ``--jobs 2``:
205 s on 2 otherwise idle AMD EPYC cores (bench/results/learning.txt). The csv market is one continuous
regime path (default parameters) cut into a 60k-bar training file and the 20k bars after
it as the test file. Its scores are not comparable with the simulated markets': a
continuous backtest keeps the lot size fixed in units, so the exposure drifts with the
price over 20k bars (and a policy losing steadily, like random, can go bust). Runs ``--jobs`` training
processes at once, one torch thread each. Prints a table, then ONE JSON line.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from gymnasium.utils import seeding  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import learning_baselines as rules  # noqa: E402
from envs.config import EnvConfig  # noqa: E402
from envs.core import TradingCore  # noqa: E402
from envs.data import MarketData, load_ohlcv  # noqa: E402
from envs.markets.processes import DEFAULTS, paths_from_noise, regime_drift  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_history, backtest_simulated, evaluation_seeds  # noqa: E402
from ppo_lstm.algo.seeding import env_seeds  # noqa: E402

MARKETS: dict[str, dict[str, Any]] = {
    "regime-1bp": {"market": "regime", "fee_bps": 1.0},
    "regime-10bps": {"market": "regime", "fee_bps": 10.0},
    "ou-10bps": {"market": "ou", "fee_bps": 10.0},
    "regime-10bps-csv": {"market": "regime", "fee_bps": 10.0, "csv": "regime"},
    # the edge is only in a feature column: see write_signal_csv
    "signal-5bps": {"market": "gbm", "fee_bps": 5.0, "csv": "signal", "model": "signal",
                    "features": "signal,noise", "additive": True},
}
SIGNAL_PHI, SIGNAL_EDGE, SIGNAL_NOISE = 0.9, 0.0015, 0.01  # AR(1) coefficient; next log return = EDGE s + NOISE e
DEFAULT_MARKETS = "regime-1bp,regime-10bps,ou-10bps"
EVAL_SEED = 0  # test paths: evaluation_seeds(EVAL_SEED, episodes), >= 2**64
TUNE_EPISODES = 64  # per training env: the first 8 x 64 training paths of seed 1 tune the thresholds
THRESHOLDS_BPS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 25, 30)
CSV_TRAIN_BARS, CSV_TEST_BARS = 60_000, 20_000
SB3_STEPS, SB3_EPISODES = 16, 8  # n_steps per env, envs (128 transitions per update, as ours)


def env_config(name: str) -> EnvConfig:
    spec = {k: v for k, v in MARKETS[name].items() if k not in ("csv", "model", "additive")}
    return EnvConfig(slippage_bps=0.0, **spec)


# ----------------------------------------------------------------------------- test paths and scoring


@dataclass
class Paths:
    """Bars of m episodes ([m, B] open/close and the hidden drift, or None) and how to trade them.

    ``new_core()`` gives a seeded TradingCore before its first reset; the m episodes are
    ``blocks`` consecutive episodes of its ``m / blocks`` envs (block k: rows k*n..(k+1)*n-1).
    """

    env: EnvConfig
    open: np.ndarray
    close: np.ndarray
    drift: Optional[np.ndarray]
    new_core: Any
    blocks: int = 1
    additive: bool = False  # score by money made per bar (see additive_score), not by log growth


def simulated_paths(env: EnvConfig, seeds: list[int], episodes_per_seed: int = 1) -> Paths:
    """``episodes_per_seed`` consecutive episodes of each seed's env, as the trainer's envs draw them."""

    def new_core() -> TradingCore:
        core = TradingCore(len(seeds), env)
        core.rngs = [seeding.np_random(s)[0] for s in seeds]
        core.market.record_drift()
        return core

    core = new_core()
    opens, closes, drifts = [], [], []
    for _ in range(episodes_per_seed):
        core.reset_rows(core.rows)
        opens.append(core.open.copy())
        closes.append(core.close.copy())
        drifts.append(core.market.drift.copy())
    return Paths(env, np.concatenate(opens), np.concatenate(closes), np.concatenate(drifts), new_core,
                 episodes_per_seed)


def history_paths(env: EnvConfig, data: MarketData, drift: np.ndarray, additive: bool = False) -> Paths:
    """The whole file as one continuous episode (as ``backtest_history`` trades it)."""
    steps = len(data) - env.window - 1
    config = replace(env, episode_length=steps)

    def new_core() -> TradingCore:
        core = TradingCore(1, config, data, span=(0, len(data)), time_scale=env.episode_length)
        core.rngs = [np.random.default_rng(0)]  # one start is possible: no draw matters
        return core

    core = new_core()
    core.reset_rows(core.rows)
    return Paths(config, core.open.copy(), core.close.copy(), drift[None, :], new_core, additive=additive)


def trade(paths: Paths, lots: np.ndarray) -> dict[str, float]:
    """Drive the env's TradingCore with target ``lots`` [m, L] (episodes start flat); score it."""
    env = paths.env
    offset = 0 if env.no_short else env.max_position
    m, L = lots.shape
    n = m // paths.blocks
    core = paths.new_core()
    log_growth = 0.0
    for k in range(paths.blocks):
        core.reset_rows(core.rows)
        actions = (lots[k * n:(k + 1) * n] + offset).astype(np.int64)
        for j in range(L):
            core.step(actions[:, j])
        if paths.additive:
            log_growth += float(np.sum(core.ledger.equity / env.initial_cash - 1.0))
        else:
            log_growth += float(np.sum(np.log(np.maximum(core.ledger.equity, 1e-300) / env.initial_cash)))
    traded = float(np.abs(np.diff(lots, axis=1, prepend=0.0)).sum())
    return {"bps_per_bar": 1e4 * log_growth / (m * L), "turnover": 100.0 * traded / (m * L)}


def score_backtest(result, additive: bool = False) -> dict[str, float]:
    """Score and turnover (lots traded per 100 bars, episodes start flat) of a BacktestResult.

    ``additive``: the money made per bar in bps of the starting cash, ``(equity[T] /
    equity[0] - 1) / T`` (a continuous backtest trades a fixed number of units, so over a
    long, profitable file its equity grows by adding, not compounding, and log growth per
    bar shrinks as the file gets longer); else log growth per bar."""
    bars = result.bars
    if additive:
        growth = result.equity[-1] / result.equity[0] - 1.0
    else:
        growth = math.log(max(result.equity[-1], 1e-300) / result.equity[0])
    pos = result.position.astype(np.float64)
    L = result.episode_length or bars
    pos = pos.reshape(-1, L)
    traded = float(np.abs(np.diff(pos, axis=1, prepend=0.0)).sum())
    return {"bps_per_bar": 1e4 * growth / bars, "turnover": 100.0 * traded / bars}


def model_signal(paths: Paths, market: str) -> np.ndarray:
    env = paths.env
    W, L = env.window, env.episode_length
    if market == "signal":  # the file's expected next-bar log return, EDGE x signal, known at each decision bar
        return paths.drift[:, rules.decision_bars(W, L)]
    if market == "regime":
        d = DEFAULTS["regime"]
        return rules.regime_filter(paths.open, paths.close, W, L, d["persistence"], d["drift"], d["sigma"])
    if market == "ou":
        return rules.ou_signal(paths.open, paths.close, W, L, DEFAULTS["ou"]["theta"])
    raise ValueError(f"no model rule for {market}")


def best_threshold(paths: Paths, market: str) -> tuple[float, dict[str, float]]:
    """The hysteresis threshold (bps of expected return) that scores best on ``paths``."""
    signal = model_signal(paths, market)
    K, short = paths.env.max_position, paths.env.no_short
    scores = {thr: trade(paths, rules.hysteresis(signal, thr / 1e4, K, short))["bps_per_bar"]
              for thr in THRESHOLDS_BPS}
    best = max(scores, key=scores.get)
    return float(best), {str(k): round(v, 3) for k, v in scores.items()}


def baselines(name: str, test: Paths, tune: Paths, seed: int = 0) -> dict[str, dict[str, float]]:
    env = test.env
    market = MARKETS[name].get("model", env.market)
    W, L, K, short = env.window, env.episode_length, env.max_position, env.no_short
    m = test.close.shape[0]
    out = {
        "buy-and-hold": trade(test, rules.buy_and_hold(m, L, K)),
        "MA 10/40": trade(test, rules.ma_crossover(test.close, W, L, 10, 40, K, short)),
        "random": trade(test, rules.random_positions(m, L, np.random.default_rng(seed), K, short)),
    }
    threshold, grid = best_threshold(tune, market)
    label = "Bayes filter" if market == "regime" else "known-model rule"
    out[label] = trade(test, rules.hysteresis(model_signal(test, market), threshold / 1e4, K, short))
    out[label]["threshold_bps"] = threshold
    out[label]["tuning_grid"] = grid  # type: ignore[assignment]
    if market == "regime" and test.drift is not None and name != "signal-5bps":
        out["regime oracle"] = trade(test, rules.regime_oracle(test.drift, W, L, K))
    return out


# ----------------------------------------------------------------------------- regime CSV files


def write_regime_csv(directory: Path, seed: int) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """One continuous regime path (default parameters) split into a training file (the first
    CSV_TRAIN_BARS bars) and a later test file; returns both paths and their hidden drifts."""
    bars = CSV_TRAIN_BARS + CSV_TEST_BARS
    rng = np.random.default_rng([0x43535600, seed])
    u = rng.random((1, 8))
    u[0, 0] = 0.5  # start price ~32: keeps 80k bars of trends within printable prices
    z = rng.standard_normal((1, bars))
    ext = rng.random((1, bars))
    aux = rng.standard_normal((1, 3, bars))
    p = paths_from_noise("regime", u, z, ext, aux=aux)
    drift = regime_drift("regime", u, ext)[0]
    time_index = pd.date_range("2001-01-01", periods=bars, freq="h")
    frame = pd.DataFrame({"Date": time_index.strftime("%Y-%m-%d %H:%M:%S"),
                          **{k.capitalize(): p[k][0] for k in ("open", "high", "low", "close", "volume")}})
    train, test = directory / "regime_train.csv", directory / "regime_test.csv"
    frame.iloc[:CSV_TRAIN_BARS].to_csv(train, index=False, float_format="%.12g")
    frame.iloc[CSV_TRAIN_BARS:].to_csv(test, index=False, float_format="%.12g")
    return train, test, drift[:CSV_TRAIN_BARS], drift[CSV_TRAIN_BARS:]


def write_signal_csv(directory: Path, seed: int) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A market whose whole edge is in a column: ``signal`` is an AR(1) with lag-1
    autocorrelation SIGNAL_PHI and unit variance, and bar t+1's log return (open at bar t's
    close) is ``SIGNAL_EDGE * signal[t] + SIGNAL_NOISE * e``; ``noise`` is an independent
    AR(1) of the same law, related to nothing. Hourly bars; the first CSV_TRAIN_BARS train,
    the CSV_TEST_BARS after them test. Returns both paths and the expected next-bar log
    return ``SIGNAL_EDGE * signal`` of every bar of each."""
    bars = CSV_TRAIN_BARS + CSV_TEST_BARS
    rng = np.random.default_rng([0x5349474E, seed])
    shocks = rng.standard_normal((2, bars)) * math.sqrt(1.0 - SIGNAL_PHI ** 2)
    ar = np.empty((2, bars))
    ar[:, 0] = rng.standard_normal(2)  # the stationary law from the first bar
    for t in range(1, bars):
        ar[:, t] = SIGNAL_PHI * ar[:, t - 1] + shocks[:, t]
    signal, noise = ar
    logret = np.empty(bars)
    logret[0] = 0.0
    logret[1:] = SIGNAL_EDGE * signal[:-1] + SIGNAL_NOISE * rng.standard_normal(bars - 1)
    close = 30.0 * np.exp(np.cumsum(logret))
    open_ = np.concatenate(([close[0]], close[:-1]))
    wick = np.abs(rng.standard_normal((2, bars))) * 0.002
    time_index = pd.date_range("2001-01-01", periods=bars, freq="h")
    frame = pd.DataFrame({"Date": time_index.strftime("%Y-%m-%d %H:%M:%S"), "Open": open_,
                          "High": np.maximum(open_, close) * (1 + wick[0]), "Low": np.minimum(open_, close) * (1 - wick[1]),
                          "Close": close, "Volume": 1000.0, "signal": signal, "noise": noise})
    train, test = directory / "signal_train.csv", directory / "signal_test.csv"
    frame.iloc[:CSV_TRAIN_BARS].to_csv(train, index=False, float_format="%.12g")
    frame.iloc[CSV_TRAIN_BARS:].to_csv(test, index=False, float_format="%.12g")
    expected = SIGNAL_EDGE * signal
    return train, test, expected[:CSV_TRAIN_BARS], expected[CSV_TRAIN_BARS:]


# ----------------------------------------------------------------------------- training jobs (child processes)


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def train_ours(job: dict[str, Any]) -> dict[str, Any]:
    """Train one seed and score it greedily on the test set (runs in a child process; with
    ``workers`` > 1, in this process, which launches the workers as the CLI does)."""
    torch.set_num_threads(1)
    from ppo_lstm.train.build import build_agent
    from ppo_lstm.rundir.checkpoint import CheckpointDir
    from ppo_lstm.config import TrainConfig
    from ppo_lstm.distributed import LocalComm, Worker, launch
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer
    from ppo_lstm.train.worker import train_worker

    env = env_config(job["market"])
    overrides = dict(job["overrides"])
    env_over = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("env.")}
    env = replace(env, **env_over)
    if job.get("no_features"):
        env = replace(env, features=None)
    episodes = max(8, job["steps"] // env.episode_length)
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(episodes=episodes, seed=job["seed"], progress=False, log_file=os.path.join(tmp, "log"),
                             checkpoint_dir=tmp, checkpoint_interval=10**9, log_interval=10**9,
                             data=job.get("train_csv"), env=env, **overrides)
        workers = job.get("workers", 1)
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the trainer's log lines
            start = time.perf_counter()
            if workers == 1:
                trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
                trainer.run()
                agent, env_steps = trainer.agent, trainer.state.env_steps
            else:  # gloo workers, launched as `--distributed --device cpu --num-workers N` does
                config = replace(config, distributed=True, num_workers=workers, device="cpu")
                if launch(config, "cpu", train_worker) != 0:
                    raise RuntimeError(f"training with {workers} workers failed: {job}")
                state = torch.load(CheckpointDir(tmp, 1).latest(), map_location="cpu", weights_only=False)
                agent = build_agent(config)
                agent.load_state_dict(state["model"])
                env_steps = state["counters"]["env_steps"]
        wall = time.perf_counter() - start
        with open(os.path.join(tmp, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        tail = rows[-max(1, len(rows) // 10):]
        entropy = float(np.mean([float(r["entropy"]) for r in tail]))
    agent = agent.eval()
    if job.get("test_csv"):
        data = load_ohlcv(job["test_csv"], features=env.feature_names)
        result = backtest_history(agent, env, data)
    else:
        result = backtest_simulated(agent, env, job["episodes"], EVAL_SEED)
    out = score_backtest(result, additive=bool(job.get("additive")))
    out.update(seed=job["seed"], wall_s=wall, env_steps=env_steps, final_entropy=entropy, workers=workers)
    return out


def train_sb3(job: dict[str, Any]) -> dict[str, Any]:
    """RecurrentPPO on the same env and budget, scored greedily on the same test paths."""
    torch.set_num_threads(1)
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from envs.trading_env import TradingEnv

    env = env_config(job["market"])
    data = load_ohlcv(job["train_csv"], features=env.feature_names) if job.get("train_csv") else None
    vec = make_vec_env(lambda: TradingEnv(env, data=data), n_envs=SB3_EPISODES, seed=job["seed"])
    model = RecurrentPPO("MlpLstmPolicy", vec, n_steps=SB3_STEPS, batch_size=SB3_EPISODES * SB3_STEPS // 4,
                         n_epochs=4, seed=job["seed"], device="cpu",
                         policy_kwargs=dict(lstm_hidden_size=64, net_arch=[64, 64], shared_lstm=True,
                                            enable_critic_lstm=False))
    start = time.perf_counter()
    model.learn(total_timesteps=job["steps"])
    wall = time.perf_counter() - start
    if job.get("test_csv"):
        test = load_ohlcv(job["test_csv"], features=env.feature_names)
        paths = history_paths(env, test, np.zeros(len(test)))
    else:
        paths = simulated_paths(env, evaluation_seeds(EVAL_SEED, job["episodes"]))
    core = paths.new_core()
    core.reset_rows(core.rows)
    n, L = core.n, paths.env.episode_length
    state, starts = None, np.ones(n, bool)
    lots = np.empty((n, L))
    offset = 0 if env.no_short else env.max_position
    for j in range(L):
        actions, state = model.predict(core.observe(), state=state, episode_start=starts, deterministic=True)
        starts = np.zeros(n, bool)
        core.step(np.asarray(actions, np.int64))
        lots[:, j] = np.asarray(actions, np.float64) - offset
    out = trade(paths, lots)  # replays the same actions through a fresh core: the same equity
    out.update(seed=job["seed"], wall_s=wall, env_steps=int(model.num_timesteps))
    return out


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "result": (train_sb3 if job["kind"] == "sb3" else train_ours)(job)}


# ----------------------------------------------------------------------------- the table


def _fmt(x: Optional[float], spec: str = "8.2f") -> str:
    return f"{x:{spec}}" if x is not None and math.isfinite(x) else f"{'-':>{len(format(0.0, spec))}}"


def print_table(report: dict[str, Any]) -> None:
    print(f"{'market':<18}{'policy':<42}{'bps/bar':>9}{'% Bayes':>9}{'turnover':>10}  note")
    for name, mk in report["markets"].items():
        ref = mk["reference_bps"]
        for policy, row in mk["rows"].items():
            share = 100.0 * row["bps_per_bar"] / ref if ref else None
            print(f"{name:<18}{policy:<42}{_fmt(row['bps_per_bar'], '9.3f')}{_fmt(share, '9.1f')}"
                  f"{_fmt(row.get('turnover'), '10.2f')}  {row.get('note', '')}")
        print()


def _shares(results: dict[str, Any], ref: float) -> dict[str, Optional[float]]:
    """Mean and worst score of one set of seeds as shares of the reference rule's."""
    return {"ours_share_mean": float(np.mean(results["scores"])) / ref if ref else None,
            "ours_share_worst": results["worst"] / ref if ref else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markets", default=DEFAULT_MARKETS, help=f"comma list of {', '.join(MARKETS)}")
    parser.add_argument("--steps", type=int, default=131_072, help="env steps per ppo-lstm-trader training run")
    parser.add_argument("--sb3-steps", type=int, help="env steps per RecurrentPPO run (default: --steps, the same budget)")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds of ppo-lstm-trader (1..N)")
    parser.add_argument("--sb3-seeds", type=int, default=1, help="training seeds of RecurrentPPO")
    parser.add_argument("--no-sb3", action="store_true", help="skip RecurrentPPO")
    parser.add_argument("--episodes", type=int, default=1000, help="held-out test episodes per market")
    parser.add_argument("--jobs", type=int, default=2, help="training processes at once (1 torch thread each)")
    parser.add_argument("--workers", default="1",
                        help="comma list of worker counts for ppo-lstm-trader, e.g. 1,2: a count above 1 trains "
                             "with that many gloo workers (as --distributed --device cpu), one run at a time")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="TrainConfig override for ppo-lstm-trader (env fields as env.NAME), repeatable")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, 1 seed, 100 test episodes")
    parser.add_argument("--json-out", type=Path, help="also write the JSON line here")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.sb3_steps, args.seeds, args.sb3_seeds, args.episodes = 4096, 4096, 1, 1, 100
    if args.sb3_steps is None:
        args.sb3_steps = args.steps
    names = [m.strip() for m in args.markets.split(",") if m.strip()]
    worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    for name in names:
        if name not in MARKETS:
            parser.error(f"unknown market {name!r}; choose from {', '.join(MARKETS)}")
    overrides = dict(item.split("=", 1) for item in args.set)
    overrides = {k: _parse_value(v) for k, v in overrides.items()}
    torch.set_num_threads(1)
    sb3 = not args.no_sb3
    if sb3:
        try:
            import sb3_contrib  # noqa: F401
        except ImportError:
            print("sb3-contrib not installed: skipping RecurrentPPO (pip install -e '.[bench]')")
            sb3 = False

    start = time.perf_counter()
    tmpdir = tempfile.TemporaryDirectory()
    jobs: list[dict[str, Any]] = []
    setups: dict[str, dict[str, Any]] = {}
    for name in names:
        setups[name] = {}
        common = {"market": name, "episodes": args.episodes}
        if MARKETS[name].get("csv"):
            write = write_signal_csv if MARKETS[name]["csv"] == "signal" else write_regime_csv
            train_csv, test_csv, train_drift, test_drift = write(Path(tmpdir.name), EVAL_SEED)
            common.update(train_csv=str(train_csv), test_csv=str(test_csv),
                          additive=bool(MARKETS[name].get("additive")))
            setups[name].update(train_drift=train_drift, test_drift=test_drift)
        jobs += [{**common, "kind": "ours", "seed": s, "steps": args.steps, "overrides": overrides, "workers": w}
                 for w in worker_counts for s in range(1, args.seeds + 1)]
        if MARKETS[name].get("features"):  # the same agent blind to the columns
            jobs += [{**common, "kind": "ours", "seed": s, "steps": args.steps, "overrides": overrides, "workers": 1,
                      "no_features": True} for s in range(1, args.seeds + 1)]
        if sb3:
            jobs += [{**common, "kind": "sb3", "seed": s, "steps": args.sb3_steps, "overrides": {}}
                     for s in range(1, args.sb3_seeds + 1)]
    jobs.sort(key=lambda j: -(j["steps"] * (1.5 if j["kind"] == "sb3" else 1.0)))  # longest first
    launched = [job for job in jobs if job.get("workers", 1) > 1]  # each starts its own workers: in this process
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(run_job, job) for job in jobs if job not in launched]
        # the baselines, in this process while the workers train
        for name in names:
            env = env_config(name)
            if MARKETS[name].get("csv"):
                job = next(j for j in jobs if j["market"] == name)
                features = env.feature_names
                additive = bool(MARKETS[name].get("additive"))
                test = history_paths(env, load_ohlcv(job["test_csv"], features=features), setups[name]["test_drift"],
                                     additive)
                tune = history_paths(env, load_ohlcv(job["train_csv"], features=features),
                                     setups[name]["train_drift"], additive)
            else:
                test = simulated_paths(env, evaluation_seeds(EVAL_SEED, args.episodes))
                tune = simulated_paths(env, env_seeds(1, 0, 8), TUNE_EPISODES)
            setups[name]["baselines"] = baselines(name, test, tune)
            setups[name]["bars"] = int(test.close.shape[0] * test.env.episode_length)
        done = [f.result() for f in futures]
    done += [run_job(job) for job in launched]  # one at a time, after the pool: each uses every core

    report: dict[str, Any] = {"bench": "learning", "steps": args.steps, "sb3_steps": args.sb3_steps if sb3 else None,
                              "seeds": args.seeds, "episodes": args.episodes, "overrides": overrides,
                              "quick": args.quick, "markets": {}}
    for name in names:
        base = setups[name]["baselines"]
        ref_label = "Bayes filter" if "Bayes filter" in base else "known-model rule"
        ref = base[ref_label]["bps_per_bar"]
        theirs = [d["result"] for d in done if d["market"] == name and d["kind"] == "sb3"]
        rows: dict[str, dict[str, Any]] = {}
        by_workers: dict[int, dict[str, Any]] = {}
        for workers in worker_counts:
            ours = sorted((d["result"] for d in done if d["market"] == name and d["kind"] == "ours"
                           and d.get("workers", 1) == workers and not d.get("no_features")),
                          key=lambda r: r["seed"])
            scores = [r["bps_per_bar"] for r in ours]
            label = "ppo-lstm-trader" + (f", {workers} workers," if workers > 1 else "")
            if MARKETS[name].get("features"):
                label += f" --features {MARKETS[name]['features']}"
            rows[f"{label} mean of {len(ours)}"] = {
                "bps_per_bar": float(np.mean(scores)), "turnover": float(np.mean([r["turnover"] for r in ours])),
                "note": f"{args.steps} steps/seed, entropy at end {np.mean([r['final_entropy'] for r in ours]):.2f}"}
            worst = min(ours, key=lambda r: r["bps_per_bar"])
            rows[f"{label} worst seed"] = {"bps_per_bar": worst["bps_per_bar"], "turnover": worst["turnover"],
                                           "note": f"seed {worst['seed']}"}
            for r in ours:
                rows[f"  seed {r['seed']}" + (f", {workers} workers" if workers > 1 else "")] = {
                    "bps_per_bar": r["bps_per_bar"], "turnover": r["turnover"],
                    "note": f"entropy {r['final_entropy']:.2f}, train {r['wall_s']:.0f}s"}
            by_workers[workers] = {"scores": scores, "worst": worst["bps_per_bar"], "per_seed": ours}
        blind = sorted((d["result"] for d in done if d["market"] == name and d.get("no_features")),
                       key=lambda r: r["seed"])
        if blind:
            rows[f"ppo-lstm-trader without --features mean of {len(blind)}"] = {
                "bps_per_bar": float(np.mean([r["bps_per_bar"] for r in blind])),
                "turnover": float(np.mean([r["turnover"] for r in blind])),
                "note": f"{args.steps} steps/seed; seeds {', '.join(format(r['bps_per_bar'], '.3f') for r in blind)}"}
        if theirs:
            rows[f"RecurrentPPO mean of {len(theirs)}"] = {
                "bps_per_bar": float(np.mean([r["bps_per_bar"] for r in theirs])),
                "turnover": float(np.mean([r["turnover"] for r in theirs])),
                "note": f"{args.sb3_steps} steps/seed" + (" (FEWER than ours)"
                                                          if args.sb3_steps < args.steps else "")}
        for label, row in base.items():
            note = f"threshold {row['threshold_bps']:g} bps (tuned on training paths)" if "threshold_bps" in row else ""
            rows[label] = {"bps_per_bar": row["bps_per_bar"], "turnover": row["turnover"], "note": note}
        report["markets"][name] = {
            "env": {k: v for k, v in MARKETS[name].items()}, "test_bars": setups[name]["bars"],
            "reference": ref_label, "reference_bps": ref, "rows": rows,
            **_shares(by_workers[worker_counts[0]], ref), "ours_per_seed": by_workers[worker_counts[0]]["per_seed"],
            "by_workers": {w: {**_shares(b, ref), "per_seed": b["per_seed"]} for w, b in by_workers.items()},
            "sb3_per_seed": theirs, "without_features_per_seed": blind,
            "threshold_grid_bps": base[ref_label]["tuning_grid"]}
    report["wall_s"] = time.perf_counter() - start
    tmpdir.cleanup()
    print_table(report)
    print(f"wall time {report['wall_s']:.0f}s; score = mean net log return per bar (bps) on held-out bars; "
          f"turnover = lots traded per 100 bars")
    for name in names:
        if MARKETS[name].get("additive"):
            print(f"{name}: score = money made per bar in bps of the starting cash, not log growth (score_backtest)")
    line = json.dumps(report, default=float)
    print(line)
    if args.json_out:
        args.json_out.write_text(line + "\n")


if __name__ == "__main__":
    main()
