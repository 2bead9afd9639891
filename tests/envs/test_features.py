"""--features: the normalisation rule, the loader's checks, the observation, and the run end to
end (training, hold-out, evaluate, resume, bad input, two workers)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, Run, cli_in_process, load_state, run_cli
from envs.config import EnvConfig
from envs.data import DataError, load_ohlcv
from envs.data.features import (FEATURE_CLIP, FeatureNormaliser, feature_zscores, first_defined_bar,
                           parse_feature_names)
from envs.vector import VectorTradingEnv
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.rundir.checkpoint import from_safe
from ppo_lstm.evaluation.loading import load_policy

WINDOW, LENGTH = 8, 16  # TINY's


def write_prices(path: Path, bars: int, seed: int = 0, warmup: int = 0, shuffle: bool = False,
                 **extra: np.ndarray) -> pd.DataFrame:
    """Daily bars of a random walk with a ``Volume`` column, a ``Sig`` column (NaN in its first
    ``warmup`` rows) and ``extra`` columns; rows shuffled in the file with ``shuffle``."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    open_ = np.r_[100.0, close[:-1]]
    sig = rng.standard_normal(bars)
    sig[:warmup] = np.nan
    frame = pd.DataFrame({"date": pd.date_range("2020-01-01", periods=bars, freq="D").strftime("%Y-%m-%d"),
                          "open": open_, "high": np.maximum(open_, close), "low": np.minimum(open_, close),
                          "close": close, "Volume": rng.integers(1000, 9000, bars), "Sig": sig, **extra})
    if shuffle:
        frame = frame.sample(frac=1.0, random_state=1)
    frame.to_csv(path, index=False)
    return frame


def reference_zscores(x: np.ndarray, window: int) -> np.ndarray:
    """The documented rule, bar by bar, written plainly."""
    out = np.full(len(x), np.nan)
    for b in range(len(x)):
        if np.isnan(x[b]):
            continue
        values = x[max(0, b - window + 1): b + 1]
        values = values[~np.isnan(values)]
        mean, std = values.mean(), values.std()
        out[b] = 0.0 if std <= 1e-9 * abs(mean) else np.clip((x[b] - mean) / std, -FEATURE_CLIP, FEATURE_CLIP)
    return out


# ----------------------------------------------------------------------------- the rule


def test_zscores_follow_the_documented_rule_and_are_causal():
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal(700)) * 50 + 1e6  # a large level: the rule must not lose precision
    x[:30] = np.nan
    x[400] = 1e7  # an outlier: clipped
    z = feature_zscores(x[:, None], window=64)[:, 0]
    ref = reference_zscores(x, 64)
    assert np.array_equal(np.isnan(z), np.isnan(ref)) and np.isnan(z[:30]).all()
    np.testing.assert_allclose(z[30:], ref[30:], rtol=1e-5, atol=1e-5)
    assert z[30] == 0.0 and z[400] == FEATURE_CLIP
    assert np.nanmax(np.abs(z)) <= FEATURE_CLIP
    # causal: cutting the file after bar b changes nothing up to b
    assert np.array_equal(feature_zscores(x[:450, None], window=64)[:, 0], z[:450], equal_nan=True)


def test_a_constant_column_gives_zeros_not_nan():
    x = np.full((600, 2), 3.3)
    x[:, 1] = 1e9 + 0.1  # large and constant: rounding must not pass for spread
    z = feature_zscores(x)
    assert np.isfinite(z).all() and not z.any()


def test_the_streaming_normaliser_matches_the_file_bit_for_bit():
    rng = np.random.default_rng(1)
    window = 256  # the rule at any window; a bar costs the stream window^2 / 2 terms, so a short one keeps it quick
    x = rng.standard_normal((window + 300, 3)) * [1.0, 1e4, 1e-3] + [0.0, 5e5, 1.0]
    x[:40, 1] = np.nan
    batch = feature_zscores(x, window)
    stream = FeatureNormaliser(3, window)
    live = np.stack([stream.update(row) for row in x])
    assert np.array_equal(live, batch, equal_nan=True)
    for last in (0, 1, 7, window + 5, len(x), len(x) + 3):  # the tail alone: the same bits
        assert np.array_equal(feature_zscores(x, window, last=last), batch[len(batch) - min(last, len(x)):],
                              equal_nan=True)


def test_feature_names_and_first_defined_bar():
    assert parse_feature_names(" Vol , rsi_14") == ("Vol", "rsi_14") and parse_feature_names(None) == ()
    for bad in ("a,,b", "a,A"):
        with pytest.raises(ValueError, match="--features"):
            parse_feature_names(bad)
    x = np.zeros((10, 2))
    x[:3, 0] = np.nan
    x[:5, 1] = np.nan
    assert first_defined_bar(x) == 5 and first_defined_bar(None) == 0
    assert EnvConfig(window=8, features="a,b").obs_dim == 8 + 3 + 2 + 1  # + the default EMA(500) deviation


# ----------------------------------------------------------------------------- the loader


def test_columns_match_any_case_and_keep_their_warmup(tmp_path):
    write_prices(tmp_path / "p.csv", 50, warmup=7, shuffle=True)
    data = load_ohlcv(tmp_path / "p.csv", features=("sig", "VOLUME"))
    frame = pd.read_csv(tmp_path / "p.csv").sort_values("date")
    assert data.feature_names == ("sig", "VOLUME") and data.features.shape == (50, 2)
    np.testing.assert_array_equal(data.features[:, 0], frame["Sig"].to_numpy())
    np.testing.assert_array_equal(data.features[:, 1], frame["Volume"].to_numpy())
    assert data.first_defined == 7
    assert load_ohlcv(tmp_path / "p.csv").features is None  # without --features nothing changes


@pytest.mark.parametrize("value, what", [("nan", "missing value (NaN)"), ("inf", "infinite value"),
                                         ("abc", "non-numeric value 'abc'")])
def test_a_bad_value_after_the_warmup_names_file_column_and_row(tmp_path, value, what):
    frame = write_prices(tmp_path / "p.csv", 40, warmup=3)
    frame["Sig"] = frame["Sig"].astype(object)
    frame.loc[20, "Sig"] = value
    frame.to_csv(tmp_path / "p.csv", index=False)
    with pytest.raises(DataError) as err:
        load_ohlcv(tmp_path / "p.csv", features=("sig",))
    message = str(err.value)
    assert str(tmp_path / "p.csv") in message and "'Sig'" in message and "row 21 (line 22)" in message
    assert what in message and "\n" not in message


def test_a_missing_feature_column_is_named(tmp_path):
    write_prices(tmp_path / "p.csv", 40)
    with pytest.raises(DataError, match=r"has no feature column 'rsi' \(--features\); columns found: .*'Sig'"):
        load_ohlcv(tmp_path / "p.csv", features=("sig", "rsi"))


# ----------------------------------------------------------------------------- the env


def test_observations_carry_the_normalised_features_at_the_decision_bar(tmp_path):
    write_prices(tmp_path / "p.csv", 400, warmup=60)
    data = load_ohlcv(tmp_path / "p.csv", features=("Sig", "Volume"))
    z = feature_zscores(data.features)
    config = EnvConfig(window=WINDOW, episode_length=LENGTH, features="Sig,Volume", ema_spans="none")
    env = VectorTradingEnv(16, config, data=data)
    obs, _ = env.reset(seed=5)
    assert obs.shape == (16, WINDOW + 5) and env.single_observation_space.contains(obs[0])
    start = env.core.start.copy()
    assert start.min() >= 60 - WINDOW  # the first decision (bar start + W) reads defined features
    for j in range(LENGTH):
        np.testing.assert_array_equal(obs[:, WINDOW + 3:], z[start + WINDOW + j])
        obs, *_ , info = env.step(np.random.default_rng(j).integers(0, 3, 16))
    assert "final_obs" in info
    np.testing.assert_array_equal(info["final_obs"][:, WINDOW + 3:], z[start + WINDOW + LENGTH])
    # without a warm-up, the first W+3 entries are the plain observation's
    write_prices(tmp_path / "full.csv", 400)
    full = load_ohlcv(tmp_path / "full.csv", features=("Sig", "Volume"))
    plain = VectorTradingEnv(16, EnvConfig(window=WINDOW, episode_length=LENGTH, ema_spans="none"), data=full
                             ).reset(seed=5)[0]
    np.testing.assert_array_equal(plain, VectorTradingEnv(16, config, data=full).reset(seed=5)[0][:, :WINDOW + 3])


def test_features_need_data_and_matching_columns(tmp_path):
    config = EnvConfig(window=WINDOW, episode_length=LENGTH, features="Sig")
    with pytest.raises(ValueError, match="simulated market has none"):
        VectorTradingEnv(2, config)
    write_prices(tmp_path / "p.csv", 100)
    with pytest.raises(ValueError, match="loaded with"):
        VectorTradingEnv(2, config, data=load_ohlcv(tmp_path / "p.csv"))


# ----------------------------------------------------------------------------- the run, end to end


@pytest.mark.e2e
def test_train_holdout_evaluate_and_resume_with_features(tmp_path):
    write_prices(tmp_path / "p.csv", 300, warmup=20)
    result = cli_in_process(tmp_path, *TINY, "--data", "p.csv", "--features", "sig,VOLUME", "--episodes", "16",
                            "--checkpoint-interval", "8")  # training in-process; the printed command in a real one
    assert result.returncode == 0, result.output
    state = load_state(tmp_path / "checkpoints" / "best.pt")
    assert state["config"]["env"]["features"] == "sig,VOLUME"
    assert state["model"]["encoder.0.weight"].shape[1] == WINDOW + 6  # + 2 features + the EMA(500) deviation
    agent, config = load_policy(tmp_path / "checkpoints" / "best.pt")
    assert config.env.feature_names == ("sig", "VOLUME")
    # the printed command reproduces the hold-out figures without being told the features
    command = next(line for line in result.stdout.splitlines() if line.startswith("Reproduce it: "))
    words = command[len("Reproduce it: "):].split()
    held = next(line for line in result.stdout.splitlines() if line.startswith("Best checkpoint:"))
    evaluated = Run(tmp_path, words[1:] + ["--json"], launcher=[sys.executable, "-m", "ppo_lstm.evaluate"]).wait()
    assert evaluated.returncode == 0, evaluated.output
    report = json.loads(evaluated.stdout)
    assert f"Return: {report['agent']['total_return_pct']:+.2f}%" in held
    # the whole file: the first decision is at the first bar where every feature is defined
    data = load_ohlcv(tmp_path / "p.csv", features=config.env.feature_names)
    whole = backtest_history(agent, config.env, data)
    assert whole.start == str(pd.Timestamp(data.timestamps[20]).isoformat())
    # resume: the features come from the checkpoint
    resumed = cli_in_process(tmp_path, *TINY, "--resume", "--episodes", "24")
    assert resumed.returncode == 0, resumed.output
    assert "Settings changed on resume: --episodes 16 -> 24" in resumed.stdout
    assert load_state(tmp_path / "checkpoints" / "checkpoint_u00000012.pt")["config"]["env"]["features"] == "sig,VOLUME"


def test_bad_feature_input_is_one_line_exit_2(tmp_path, capsys):
    from ppo_lstm.evaluation.cli import main as evaluate_main

    write_prices(tmp_path / "p.csv", 300)
    write_prices(tmp_path / "other.csv", 300)
    pd.read_csv(tmp_path / "other.csv").drop(columns=["Sig"]).to_csv(tmp_path / "other.csv", index=False)
    cases = [
        (["--features", "sig"], "--features sig names columns of --data"),
        (["--data", "p.csv", "--features", "rsi"], "p.csv: has no feature column 'rsi' (--features)"),
        (["--data", "p.csv", "--features", "sig,SIG"], "--features names the column 'SIG' twice"),
    ]
    for args, message in cases:
        result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--checkpoint-dir", "none", *args)
        assert result.returncode == 2 and len(result.error_lines()) == 1, result.output
        assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "none").exists()
    trained = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--data", "p.csv", "--features", "sig",
                             "--holdout", "0")
    assert trained.returncode == 0, trained.output
    capsys.readouterr()
    for args, message in [(["--data", str(tmp_path / "other.csv")], "other.csv: has no feature column 'sig'"),
                          ([], "was trained with --features sig")]:
        assert evaluate_main(["--checkpoint", str(tmp_path / "checkpoints"), *args]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and message in err[0], err


@pytest.mark.e2e
def test_two_workers_with_features_all_trade_the_data(tmp_path):
    write_prices(tmp_path / "p.csv", 300, warmup=10)
    result = run_cli(tmp_path, *TINY, "--distributed", "--num-gpus", "2", "--data", "p.csv", "--features", "sig",
                     "--episodes", "8", "--holdout", "0")
    assert result.returncode == 0, result.output
    assert ("Markets: every worker trades --data, since --features sig reads its columns and a simulated market "
            "has none") in result.stdout
    state = load_state(tmp_path / "checkpoints" / "best.pt")
    assert len(state["ranks"]) == 2
    for rank in state["ranks"]:  # each rank's envs are on the file: its fingerprint and start offsets
        env = rank["env"]
        assert env["data"]["bars"] == 300 and env["data"]["features"] == "sig"
        assert (from_safe(env["start"]) >= 10 - WINDOW).all()
