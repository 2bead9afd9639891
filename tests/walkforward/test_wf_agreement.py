"""The ensemble's agreement with its seeds (ppo_lstm.walkforward.agreement) and the positions it
is computed from: kept in each job's test.json and in FoldTrades, an older test.json without them
still loading. In-process, no training (checkpoints of untrained nets), fast."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.rundir.checkpoint import atomic_save
from ppo_lstm.walkforward.agreement import ensemble_agreement
from ppo_lstm.walkforward.folds import Fold
from ppo_lstm.walkforward.jobs import DONE_NAME, Job
from ppo_lstm.walkforward.policies import EnsemblePolicy
from ppo_lstm.walkforward.trading import FoldTrades, finish_job, trade, trade_fold
from test_wf_trading import ENV, agent, walk


def fold(positions: dict[int, list[int] | None], ensemble: list[int] | None) -> FoldTrades:
    bars = len(ensemble) if ensemble is not None else 4
    zeros = np.zeros(bars)
    return FoldTrades(time=np.asarray(pd.bdate_range("2021-01-01", periods=bars), dtype="datetime64[ns]"),
                      seeds={s: zeros for s in positions}, ensemble=zeros, baselines={},
                      seed_positions={s: None if p is None else np.asarray(p) for s, p in positions.items()},
                      ensemble_positions=None if ensemble is None else np.asarray(ensemble))


def test_agreement_counts_each_seed_and_the_majority_per_fold_and_overall() -> None:
    flat_while_long = fold({1: [1, 1, 1, 1], 2: [1, 1, 1, 1], 3: [1, 1, 0, -1]}, [0, 0, 0, 0])
    mixed = fold({1: [1, 0, -1, 1], 2: [1, 1, 1, -1], 3: [-1, -1, 0, 1]}, [1, 1, 0, -1])
    summary, lines = ensemble_agreement({"A.csv": [(1, flat_while_long), (2, mixed)]}, [1, 2, 3])
    first, second = summary["per_fold"]
    assert first["seeds"] == {"1": 0.0, "2": 0.0, "3": 0.25} and (first["majority"], first["majority_bars"]) == (0.0, 4)
    # fold 2: a majority holds +1 at bars 0 and 3, none at bars 1 and 2; the ensemble follows it at bar 0 only
    assert second["seeds"] == {"1": 0.25, "2": 0.75, "3": 0.25}
    assert (second["majority"], second["majority_bars"]) == (0.5, 2)
    overall = summary["overall"]
    assert overall["bars"] == 8 and overall["seeds"] == {"1": 1 / 8, "2": 3 / 8, "3": 2 / 8}
    assert overall["majority"] == 1 / 6
    assert summary["available"] and json.loads(json.dumps(summary)) == summary
    assert lines[1].startswith("## ") and "| all | 8 | 12.5 % | 37.5 % | 25.0 % | 16.7 % (6) |" in lines


def test_a_seed_without_positions_is_unavailable_and_the_others_still_count() -> None:
    old = fold({1: [1, 1, 0, 0], 2: None}, [1, 0, 0, 0])
    summary, lines = ensemble_agreement({"A.csv": [(1, old)]}, [1, 2])
    assert summary["overall"]["seeds"] == {"1": 0.75, "2": None} and summary["overall"]["majority"] is None
    assert not summary["available"] and any(line.startswith("n/a") for line in lines)


def write_checkpoint(directory: Path, seed: int) -> TrainConfig:
    config = TrainConfig(env=ENV, hidden_size=16, lstm_size=16, seed=seed, checkpoint_dir="checkpoints")
    (directory / "checkpoints").mkdir(parents=True)
    atomic_save({"model": agent(seed).state_dict(), "counters": {}, "config": config.to_dict()},
                directory / "checkpoints" / "best.pt")
    return config


def test_test_json_keeps_the_positions_and_an_older_one_still_loads(tmp_path: Path) -> None:
    data = walk(200, 5)
    the_fold = Fold(1, 0, 160, 160, 190)
    jobs = []
    for seed in (0, 1):
        path = tmp_path / f"fold01-seed{seed}"
        jobs.append(Job(the_fold, seed, path, write_checkpoint(path, seed)))
        finish_job(jobs[-1], [data], data.timestamps)
    saved = json.loads((jobs[0].path / DONE_NAME).read_text())["instruments"]["walk.csv"]
    assert saved["positions"] == trade(agent(0), ENV, data, 160, 190).position.tolist()
    traded = trade_fold(jobs, data, data.timestamps)
    ensemble = trade(EnsemblePolicy([agent(0), agent(1)]), ENV, data, 160, 190).position
    assert np.array_equal(traded.ensemble_positions, ensemble)
    assert np.array_equal(traded.seed_positions[0], saved["positions"])
    older = json.loads((jobs[1].path / DONE_NAME).read_text())
    del older["instruments"]["walk.csv"]["positions"]  # a test.json written before positions were kept
    (jobs[1].path / DONE_NAME).write_text(json.dumps(older))
    again = trade_fold(jobs, data, data.timestamps)
    assert again.seed_positions[1] is None and np.array_equal(again.seeds[1], traded.seeds[1])
    summary, _ = ensemble_agreement({"walk.csv": [(1, again)]}, [0, 1])
    assert summary["overall"]["seeds"]["1"] is None and summary["overall"]["seeds"]["0"] is not None
