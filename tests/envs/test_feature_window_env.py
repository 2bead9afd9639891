"""--feature-window in the env: the observation's feature entries are the rolling z-scores over the
configured window, and with several windows each column's z-scores over each, in order; an impossible
window, or one without --features, is one line and exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY, cli_in_process
from envs.config import MAX_FEATURE_WINDOW, EnvConfig
from envs.data import load_ohlcv
from envs.data.features import FeatureNormaliser, feature_zscores, stacked_zscores
from envs.vector import VectorTradingEnv
from test_features import LENGTH, WINDOW, write_prices


@pytest.mark.parametrize("feature_window", [2, 40, 256])
def test_observations_use_the_configured_window(tmp_path, feature_window: int) -> None:
    write_prices(tmp_path / "p.csv", 400, warmup=60)
    data = load_ohlcv(tmp_path / "p.csv", features=("Sig", "Volume"))
    z = feature_zscores(data.features, feature_window)
    config = EnvConfig(window=WINDOW, episode_length=LENGTH, features="Sig,Volume", feature_window=feature_window)
    env = VectorTradingEnv(8, config, data=data)
    obs, _ = env.reset(seed=3)
    start = env.core.start.copy()
    for j in range(LENGTH):
        np.testing.assert_array_equal(obs[:, WINDOW + 3:WINDOW + 5], z[start + WINDOW + j])  # then the EMA's
        obs, *_ = env.step(np.random.default_rng(j).integers(0, 3, 8))
    assert not np.array_equal(z, feature_zscores(data.features))  # 400 bars: every window here differs from 1,024


@pytest.mark.parametrize("value", ["1", "0", str(MAX_FEATURE_WINDOW + 1)])
def test_an_impossible_window_is_one_line_exit_2(tmp_path, value: str) -> None:
    write_prices(tmp_path / "p.csv", 300)
    result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--data", "p.csv", "--features", "sig",
                            "--feature-window", value, "--checkpoint-dir", "none")
    assert result.returncode == 2 and len(result.error_lines()) == 1, result.output
    assert f"--feature-window must be 2 to {MAX_FEATURE_WINDOW} bars, got {value}" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "none").exists()


def test_a_window_without_features_is_one_line_exit_2(tmp_path) -> None:
    write_prices(tmp_path / "p.csv", 300)
    result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--data", "p.csv", "--feature-window", "512",
                            "--checkpoint-dir", "none")
    assert result.returncode == 2 and len(result.error_lines()) == 1, result.output
    assert "--feature-window 512 sets the z-score window of --features columns, and none are named" in result.stderr
    assert not (tmp_path / "none").exists()


def test_several_windows_give_each_column_one_zscore_per_window_in_order(tmp_path) -> None:
    write_prices(tmp_path / "p.csv", 400, warmup=60)
    data = load_ohlcv(tmp_path / "p.csv", features=("Sig", "Volume"))
    windows = (2, 40, 256)
    config = EnvConfig(window=WINDOW, episode_length=LENGTH, features="Sig,Volume", feature_window="2, 40,256")
    assert config.feature_window == "2,40,256" and config.feature_windows == windows
    assert config.obs_dim == WINDOW + 3 + 2 * 3 + 1  # + the default EMA(500) deviation
    z = np.stack([feature_zscores(data.features, w) for w in windows], axis=2).reshape(len(data), 6)
    assert np.array_equal(z[:, 5], feature_zscores(data.features, 256)[:, 1], equal_nan=True)  # Volume (j=1), 256: 1*3+2
    assert np.array_equal(stacked_zscores(data.features, windows), z, equal_nan=True)
    env = VectorTradingEnv(8, config, data=data)
    assert env.single_observation_space.shape == (config.obs_dim,)
    obs, _ = env.reset(seed=3)
    start = env.core.start.copy()
    for j in range(LENGTH):
        np.testing.assert_array_equal(obs[:, WINDOW + 3:WINDOW + 9], z[start + WINDOW + j])
        obs, *_ = env.step(np.random.default_rng(j).integers(0, 3, 8))


def test_several_windows_bar_by_bar_are_the_files_and_one_window_is_todays(tmp_path) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((200, 2)) * [1.0, 1e3]
    x[:25, 0] = np.nan
    assert np.array_equal(stacked_zscores(x, (64,)), feature_zscores(x, 64), equal_nan=True)
    batch = stacked_zscores(x, (5, 64))
    stream = FeatureNormaliser(2, (5, 64))
    assert np.array_equal(np.stack([stream.update(row) for row in x]), batch, equal_nan=True)
    assert np.array_equal(stacked_zscores(x, (5, 64), last=7), batch[-7:], equal_nan=True)
    one = EnvConfig(features="a", feature_window="512")
    assert one.feature_window == 512 and one == EnvConfig(features="a", feature_window=512)  # saved as before


@pytest.mark.parametrize("value, message", [
    ("1024,256", "--feature-window '1024,256': give the windows in increasing order, 256,1024"),
    ("256,256", "--feature-window '256,256' gives the window 256 twice; give each window once"),
    ("8,x", "--feature-window '8,x': 'x' is not a whole number of bars"),
    ("8,70000", f"--feature-window must be 2 to {MAX_FEATURE_WINDOW} bars, got 70000"),
])
def test_bad_windows_are_one_line_exit_2(tmp_path, value: str, message: str) -> None:
    write_prices(tmp_path / "p.csv", 300)
    result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--data", "p.csv", "--features", "sig",
                            "--feature-window", value, "--checkpoint-dir", "none")
    assert result.returncode == 2 and len(result.error_lines()) == 1, result.output
    assert message in result.stderr and "Traceback" not in result.stderr
    without = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--data", "p.csv", "--feature-window", "8,24",
                             "--checkpoint-dir", "none")
    assert without.returncode == 2 and "--feature-window 8,24 sets the z-score window of --features columns" in \
        without.stderr
