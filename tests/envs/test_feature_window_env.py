"""--feature-window in the env: the observation's feature entries are the rolling z-scores over the
configured window; an impossible window, or one without --features, is one line and exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY, cli_in_process
from envs.config import MAX_FEATURE_WINDOW, EnvConfig
from envs.data import load_ohlcv
from envs.data.features import feature_zscores
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
