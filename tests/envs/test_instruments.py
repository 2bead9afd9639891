"""Several instruments: --data paths and directories, how episodes draw an instrument, the
hold-out's single cut in time, training on 1 and 2 workers, and evaluate-ppo-lstm's
per-instrument report and JSON."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, cli_in_process, load_state, run_cli
from envs.config import EnvConfig
from envs.data import DataError, load_ohlcv
from envs.data.instruments import data_paths
from envs.vector import VectorTradingEnv
from ppo_lstm.rundir.checkpoint import from_safe
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import UsageError
from ppo_lstm.data_split import split_instruments

WINDOW, LENGTH = 8, 16  # TINY's
# (bars, first stamp, bar spacing, price scale): mixed lengths, dates, frequencies and price levels
SPECS = {"AAA.csv": (400, "2020-01-01", "D", 100.0), "BBB.csv": (900, "2020-03-01", "12h", 0.5),
         "CCC.csv": (300, "2020-02-15", "D", 3000.0)}


def write_instruments(folder: Path, specs: dict = SPECS) -> dict[str, pd.DataFrame]:
    folder.mkdir(parents=True, exist_ok=True)
    frames = {}
    for k, (name, (bars, first, spacing, scale)) in enumerate(specs.items()):
        rng = np.random.default_rng(k)
        close = scale * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
        open_ = np.r_[close[0], close[:-1]]
        frames[name] = pd.DataFrame({"date": pd.date_range(first, periods=bars, freq=spacing), "open": open_,
                                     "high": np.maximum(open_, close), "low": np.minimum(open_, close),
                                     "close": close, "volume": rng.integers(1000, 5000, bars)})
        frames[name].to_csv(folder / name, index=False)
    return frames


def test_paths_and_directories(tmp_path):
    write_instruments(tmp_path / "d")
    (tmp_path / "d" / "notes.txt").write_text("not data")
    assert data_paths(str(tmp_path / "d")) == [str(tmp_path / "d" / n) for n in ("AAA.csv", "BBB.csv", "CCC.csv")]
    assert data_paths([str(tmp_path / "d" / "BBB.csv"), str(tmp_path / "d" / "AAA.csv")])[0].endswith("BBB.csv")
    (tmp_path / "e").mkdir()
    with pytest.raises(DataError, match="directory holds no data files"):
        data_paths(str(tmp_path / "e"))
    write_instruments(tmp_path / "f", {"AAA.csv": SPECS["AAA.csv"]})
    with pytest.raises(DataError, match="are both instrument 'AAA.csv'"):
        data_paths([str(tmp_path / "d"), str(tmp_path / "f" / "AAA.csv")])


def test_episodes_draw_instruments_in_proportion_to_their_windows(tmp_path):
    write_instruments(tmp_path)
    datas = [load_ohlcv(tmp_path / n) for n in SPECS]
    spans = [(0, len(d)) for d in datas]
    env = VectorTradingEnv(256, EnvConfig(window=WINDOW, episode_length=LENGTH), data=datas, span=spans)
    env.reset(seed=0)
    counts = np.zeros(3)
    base = np.cumsum([0] + [len(d) for d in datas])
    for _ in range(20):
        for _ in range(LENGTH):
            env.step(np.ones(256, np.int64))
        k = env.core.market.instrument
        counts += np.bincount(k, minlength=3)
        start = env.core.start - base[k]  # each env's episode lies inside its own instrument
        assert (start >= 0).all() and (start + WINDOW + LENGTH < np.array([len(d) for d in datas])[k]).all()
        # its observation window is that instrument's returns: the prices it trades are its own
        np.testing.assert_array_equal(env.core.close[:, 0], np.concatenate([d.close for d in datas])[env.core.start])
    windows = np.array([len(d) - WINDOW - LENGTH for d in datas], float)
    np.testing.assert_allclose(counts / counts.sum(), windows / windows.sum(), atol=0.03)


def test_one_cut_in_time_for_all_instruments(tmp_path):
    write_instruments(tmp_path)
    datas = [load_ohlcv(tmp_path / n) for n in SPECS]
    config = TrainConfig(data=[str(tmp_path / n) for n in SPECS], data_end="2020-12-10", holdout=0.2,
                         env=EnvConfig(window=WINDOW, episode_length=LENGTH))
    splits = split_instruments(datas, config)
    last_train = max(d.timestamps[s.split - 1] for d, s in zip(datas, splits))
    first_held = min(d.timestamps[s.split] for d, s in zip(datas, splits))
    assert last_train < first_held  # no training bar of any instrument after any held-out bar
    pooled = sum(s.hi - s.lo for s in splits)
    held = sum(s.holdout_bars for s in splits)  # the last fifth of the pooled bars, and any others at the cut's stamp
    assert round(0.2 * pooled) <= held < round(0.2 * pooled) + len(datas)
    assert all(d.timestamps[s.hi - 1] <= np.datetime64("2020-12-10T23:59") for d, s in zip(datas, splits))
    # an instrument that ends before the cut has no hold-out: refused, naming it
    with pytest.raises(UsageError, match=r"CCC.csv: 0 bars of this instrument are at or after the hold-out's cut"):
        split_instruments(datas, TrainConfig(data=config.data, holdout=0.2, env=config.env))


def test_training_holdout_and_evaluate_on_several_instruments(tmp_path, capsys):
    from ppo_lstm.evaluation.cli import main as evaluate_main

    write_instruments(tmp_path / "prices")
    result = cli_in_process(tmp_path, *TINY, "--data", "prices", "--data-end", "2020-12-10", "--features", "volume",
                            "--episodes", "16", "--checkpoint-interval", "8")
    assert result.returncode == 0, result.output
    out = (tmp_path / "training.log").read_text().splitlines()  # the console's lines (its stdout is not captured)
    assert any(line.startswith("Hold-out: one cut in time for all 3 instruments") for line in out)
    held = [line for line in out if line.startswith("Holdout @")]
    assert len(held) == 2 and all(line.endswith("(mean of 3 instruments)") for line in held)
    rows = pd.read_csv(tmp_path / "checkpoints" / "metrics.csv")
    done = rows[rows["holdout_return_pct"].notna()]
    per = done[[f"{n}:holdout_return_pct" for n in SPECS]].to_numpy()
    np.testing.assert_allclose(done["holdout_return_pct"], per.mean(axis=1), atol=1e-5)
    best = load_state(tmp_path / "checkpoints" / "best.pt")
    assert best["counters"]["global_episodes"] == int(done["episodes"].to_numpy()[np.argmax(per.mean(axis=1))])
    # each printed command reproduces its instrument's figure
    commands = [line.split(": ", 1)[1] for line in out if line.startswith("Reproduce instrument")]
    assert len(commands) == 3
    best_row = done[done["episodes"] == best["counters"]["global_episodes"]].iloc[0]
    capsys.readouterr()
    for name, command in zip(SPECS, commands):
        words = command.split()[1:]
        words[words.index("--checkpoint") + 1] = str(tmp_path / "checkpoints" / "best.pt")
        words[words.index("--data") + 1] = str(tmp_path / words[words.index("--data") + 1])
        assert evaluate_main(words + ["--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["agent"]["total_return_pct"] == pytest.approx(best_row[f"{name}:holdout_return_pct"], abs=1e-5)
    # evaluate on all three files: one object per instrument, as for one file, and the mean
    files = [str(tmp_path / "prices" / n) for n in SPECS]
    assert evaluate_main(["--checkpoint", str(tmp_path / "checkpoints"), "--data", *files, "--json"]) == 0
    several = json.loads(capsys.readouterr().out)
    assert list(several) == ["instruments", "mean"] and list(several["instruments"]) == list(SPECS)
    for name, file in zip(SPECS, files):
        assert evaluate_main(["--checkpoint", str(tmp_path / "checkpoints"), "--data", file, "--json"]) == 0
        assert several["instruments"][name] == json.loads(capsys.readouterr().out)  # exactly the one-file object
    returns = [several["instruments"][n]["agent"]["total_return_pct"] for n in SPECS]
    assert several["mean"]["agent"]["total_return_pct"] == pytest.approx(np.mean(returns))
    assert several["mean"]["instruments"] == 3
    # the table, the one equity CSV and one plot per instrument
    assert evaluate_main(["--checkpoint", str(tmp_path / "checkpoints"), "--data", str(tmp_path / "prices"),
                          "--equity-csv", str(tmp_path / "eq.csv")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[4:7]] == list(SPECS) and table[7].split()[:3] == ["mean", "of", "3"]
    curves = pd.read_csv(tmp_path / "eq.csv")
    assert list(curves.columns[:2]) == ["instrument", "time"] and list(curves["instrument"].unique()) == list(SPECS)


@pytest.mark.e2e
def test_two_workers_trade_all_instruments_with_data_all_ranks(tmp_path):
    write_instruments(tmp_path / "prices")
    result = run_cli(tmp_path, *TINY, "--distributed", "--num-gpus", "2", "--data", "prices/AAA.csv",
                     "prices/BBB.csv", "--data-all-ranks", "--holdout", "0", "--episodes", "16")
    assert result.returncode == 0, result.output
    state = load_state(tmp_path / "checkpoints" / "best.pt")
    assert state["config"]["data"] == ["prices/AAA.csv", "prices/BBB.csv"]
    starts = []
    for rank in state["ranks"]:
        env = rank["env"]
        assert env["data"]["instruments"] == 2 and env["data"]["bars"] == 400 + 900
        starts.append(from_safe(env["start"]))
    assert not np.array_equal(starts[0], starts[1])  # each rank from its own seeds
