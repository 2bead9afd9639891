"""The training job of ``bench/market_family.py`` (run in a child process): one seed of
ppo-lstm-trader trained on a variant's training file with a user's flags, as the CLI parses
them, then scored greedily on the test file's episodes (``family_draw.chunk_bounds``): its final
weights, or with ``pick`` "best" its best.pt (the final weights' score under ``final``).

A flag set may hold the bench's own ``--train-fee-mult M`` (``split_train_fee``): it trains at M
times the run's ``--fee-bps`` and is scored at the fee itself, a way to price turnover in training
that no trainer flag gives.

It trains as ``bench/learning_jobs.train_ours`` does (the CLI's loop, in-process, one torch
thread, the final weights or best.pt), from a command line instead of ``TrainConfig`` overrides.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib  # noqa: E402
import csv  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.family_draw import chunk_bounds  # noqa: E402
from bench.learning_paths import score_backtest  # noqa: E402
from envs.data import load_ohlcv  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_history  # noqa: E402


def _parse(argv: list[str]) -> Any:
    """The TrainConfig of a command line (the CLI's own parse, wherever the config package keeps it)."""
    try:
        from ppo_lstm.config.command_line import parse_command_line
    except ImportError:  # before the move into ppo_lstm/config/
        from ppo_lstm.config import parse_command_line  # type: ignore[no-redef]
    return parse_command_line(argv).config


def score_episodes(agent: Any, env: Any, test_csv: str | list[str],
                   rule_bps: np.ndarray | None = None) -> dict[str, float]:
    """The agent's greedy score on every scored episode of the test file (or files, their
    episodes in order): mean net log return per bar (bps) and turnover (lots per 100 bars),
    each episode from flat. With ``rule_bps``, the ceiling's score on the same episodes
    [episodes], also ``diff_se_bps``: the standard error of the mean per-episode difference
    between the two, the noise of the agent's score against the ceiling's on these bars."""
    scores, turnovers, held, read = [], [], [], []
    for path in [test_csv] if isinstance(test_csv, str) else test_csv:
        data = load_ohlcv(path, features=env.feature_names)
        for start, end in chunk_bounds():
            result = backtest_history(agent, env, data, start=start, end=end)
            if result.late_start or result.bars != end - start - 1:
                raise RuntimeError(f"episode {start}..{end - 1} of {path} started late: {result.late_start}")
            scored = score_backtest(result)
            scores.append(scored["bps_per_bar"])
            turnovers.append(scored["turnover"])
            if data.features is not None:  # position[t] is decided at bar start + t, on that bar's column
                held.append(result.position.astype(np.float64))
                read.append(np.asarray(data.features[start:start + result.bars, 0], np.float64))
    out = {"bps_per_bar": float(np.mean(scores)), "turnover": float(np.mean(turnovers)), "episodes_scored": len(scores)}
    if rule_bps is not None:
        out["diff_se_bps"] = paired_se(np.asarray(scores), np.asarray(rule_bps, np.float64))
    if held:
        out.update(position_vs_column(np.concatenate(held), np.concatenate(read)))
    return out


def paired_se(a: np.ndarray, b: np.ndarray) -> float:
    """The standard error of the mean of ``a - b`` ([n] each, paired by position): its sample sd
    (n - 1) over sqrt(n)."""
    diff = a - b
    return float(diff.std(ddof=1) / np.sqrt(len(diff)))


def position_vs_column(position: np.ndarray, column: np.ndarray) -> dict[str, float]:
    """How a policy's positions follow a feature column (the signal kind's ``signal``):
    ``exposure`` the share of bars in the market; ``sign_agree`` the share of those whose
    position has the column's sign; ``corr`` the correlation of position and column (0 if
    either is constant)."""
    inside = position != 0
    agree = float(np.mean(np.sign(position[inside]) == np.sign(column[inside]))) if inside.any() else float("nan")
    constant = position.std() == 0 or column.std() == 0
    corr = 0.0 if constant else float(np.corrcoef(position, column)[0, 1])
    return {"exposure": float(inside.mean()), "sign_agree": agree, "corr": corr}


TRAIN_FEE_MULT = "--train-fee-mult"


def split_train_fee(argv: list[str]) -> tuple[list[str], float | None]:
    """``argv`` without the bench's ``--train-fee-mult M``, its last ``--fee-bps F`` raised to
    ``M * F``, and ``F``: the fee to score at (None without the multiplier)."""
    if TRAIN_FEE_MULT not in argv:
        return list(argv), None
    i = argv.index(TRAIN_FEE_MULT)
    mult = float(argv[i + 1])
    if not mult > 0:
        raise ValueError(f"{TRAIN_FEE_MULT} must be > 0, got {argv[i + 1]}")
    out = argv[:i] + argv[i + 2:]
    if TRAIN_FEE_MULT in out:
        raise ValueError(f"{TRAIN_FEE_MULT} is given twice")
    j = len(out) - 1 - out[::-1].index("--fee-bps")
    fee = float(out[j + 1])
    out[j + 1] = f"{fee * mult:.6g}"
    return out, fee


def train_family(job: dict[str, Any]) -> dict[str, Any]:
    """Train ``job["seed"]`` on ``job["train_csv"]`` with ``job["argv"]`` (the market's flags,
    the flag set's, the budget's) and score it on ``job["test_csv"]``."""
    torch.set_num_threads(1)
    from ppo_lstm.distributed import LocalComm, Worker
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer

    from bench.learning_jobs import _load_agent
    from ppo_lstm.rundir.checkpoint import BEST_NAME

    pick_best = job.get("pick", "final") == "best"
    with tempfile.TemporaryDirectory() as tmp:
        argv, score_fee = split_train_fee([*job["argv"], "--data", job["train_csv"], "--seed", str(job["seed"])])
        config = _parse(argv)
        scored_env = config.env if score_fee is None else replace(config.env, fee_bps=score_fee)
        # "final": one checkpoint, at the end; "best": best.pt, the hold-out's pick over the checkpoints
        # every --checkpoint-interval episodes (the flag set's, or the default), as a user's run keeps it
        config = replace(config, progress=False, log_file=os.path.join(tmp, "log"), checkpoint_dir=tmp,
                         checkpoint_interval=config.checkpoint_interval if pick_best else 10**9,
                         log_interval=10**9, device="cpu")
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the trainer's log lines
            start = time.perf_counter()
            trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
            trainer.run()
            wall = time.perf_counter() - start
        with open(os.path.join(tmp, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        tail = rows[-max(1, len(rows) // 10):]
        entropy = float(np.mean([float(r["entropy"]) for r in tail])) if tail else float("nan")
        episodes = int(trainer.config.episodes) if hasattr(trainer, "config") else None
        tests, rule_bps = job.get("test_csvs", job["test_csv"]), job.get("rule_bps")
        final = score_episodes(trainer.agent.eval(), scored_env, tests, rule_bps)
        out = final
        if pick_best:  # best.pt scored, the final weights beside it
            agent, picked = _load_agent(os.path.join(tmp, BEST_NAME), config)
            out = {**score_episodes(agent.eval(), scored_env, tests, rule_bps), "picked_env_steps": picked,
                   "final": final}
    out.update(seed=job["seed"], wall_s=wall, env_steps=int(trainer.state.env_steps), episodes=episodes,
               final_entropy=entropy)
    return out


def run_family_job(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with its ``result`` (or its ``failed`` reason: one bad run does not end the bench)."""
    try:
        return {**job, "result": train_family(job)}
    except Exception as err:  # noqa: BLE001 -- reported beside the others, and the bench exits 1
        return {**job, "failed": f"{type(err).__name__}: {err}"}
