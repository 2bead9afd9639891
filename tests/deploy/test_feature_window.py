"""--feature-window: a model trained with a 24-bar feature z-score streams the backtest's decisions bit
for bit, its state keeps 24 rows and round-trips, a state of another window is refused in one line, the
ONNX metadata records the window and the ONNX policy takes the checkpoint's decisions; a policy that
leaves the window at its default keeps the fingerprint settings recorded before the flag existed; with
several windows (8,24) the same holds, each column one z-score per window, the state keeping the longest's rows."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY, cli_in_process
from deploy_fixtures import FEATURES, VOL_WARMUP, backtest_observations, write_featured_prices
from envs.config import EnvConfig
from envs.data import load_ohlcv
from envs.data.features import FEATURE_WINDOW, feature_zscores
from ppo_lstm import TradingPolicy
from ppo_lstm.config.migrate import migrate_env
from ppo_lstm.deploy import export_onnx
from ppo_lstm.config.migrate import fingerprint_env_settings as env_settings
from ppo_lstm.deploy.state import seal
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.evaluation.loading import load_policy
from predict_checks import check_decisions_follow_evaluate, check_state_matches_scratch
from test_policy import data_head, stream_featured

WINDOW = 24  # the run's --feature-window: shorter than the file's 230 defined bars, so it matters


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prices.csv with two indicator columns and a tiny model trained on it with --feature-window 24."""
    cwd = tmp_path_factory.mktemp("feature-window")
    write_featured_prices(cwd / "prices.csv")
    result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval", "8",
                            "--features", FEATURES, "--feature-window", str(WINDOW))
    assert result.returncode == 0, result.output
    return cwd


def test_the_stream_takes_the_backtests_decisions_with_the_runs_window(run: Path) -> None:
    agent, config = load_policy(run / "checkpoints" / "best.pt")
    env, W = config.env, config.env.window
    assert env.feature_window == WINDOW
    data = load_ohlcv(run / "prices.csv", features=env.feature_names)
    result = backtest_history(agent, env, data)
    decisions = stream_featured(TradingPolicy.load(run / "checkpoints"), data)
    first = max(W, data.first_defined)
    targets = np.array([d.target_position for d in decisions])
    assert np.array_equal(targets[:-1], result.position) and len(decisions) == len(data) - first
    observations, _ = backtest_observations(agent, env, data, first - W, result.position)
    got = np.array([d.observation for d in decisions])
    assert np.array_equal(got, observations)
    # the features part is the 24-bar z-score of the whole file, not the default window's
    z = got[:, W + 3:W + 3 + len(env.feature_names)]  # then the default EMA deviation
    assert np.array_equal(z, feature_zscores(data.features, WINDOW)[first:])
    assert not np.allclose(z, feature_zscores(data.features, FEATURE_WINDOW)[first:], atol=0.05)


def test_the_state_keeps_the_windows_rows_and_refuses_another_window(run: Path, tmp_path: Path) -> None:
    data = load_ohlcv(run / "prices.csv", features=("vol_z", "Mom"))
    whole = stream_featured(TradingPolicy.load(run / "checkpoints"), data)
    first = TradingPolicy.load(run / "checkpoints")
    first.warm_up(data_head(data, 150))
    first.save_state(tmp_path / "state.json")
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["features"]["window"] == WINDOW and len(state["features"]["rows"]) == WINDOW
    assert state["policy"]["env"]["feature_window"] == WINDOW
    resumed = TradingPolicy.load(run / "checkpoints")
    resumed.load_state(tmp_path / "state.json")
    rest = stream_featured(resumed, data, first=150)
    assert rest == whole[-len(rest):] and len(rest) == len(data) - 150
    fresh = TradingPolicy.load(run / "checkpoints")
    other = seal({**state, "features": {**state["features"], "window": FEATURE_WINDOW}})
    with pytest.raises(UsageError, match=rf"other constants: window {FEATURE_WINDOW} \(now 24\); start a new "
                                         rf"state") as err:
        fresh.load_state_dict(other)
    assert "\n" not in str(err.value) and fresh.bars == 0


def test_onnx_records_the_window_and_takes_the_checkpoints_decisions(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import onnx

    from ppo_lstm.deploy.onnx_model import spec_of

    model = tmp_path / "policy.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        assert export_onnx.main(["--checkpoint", str(run / "checkpoints"), "--onnx", str(model)]) == 0
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    assert meta["feature_window"] == "24" and json.loads(meta["env"])["feature_window"] == WINDOW
    assert spec_of(meta, "m").env.feature_window == WINDOW
    with pytest.raises(ValueError, match=r"observation constants \(feature_window\)"):
        spec_of({**meta, "feature_window": "256"}, "m")
    data = load_ohlcv(run / "prices.csv", features=("vol_z", "Mom"))
    onnx_route = stream_featured(TradingPolicy.from_onnx(model), data)
    torch_route = stream_featured(TradingPolicy.load(run / "checkpoints"), data)
    assert np.array_equal([d.observation for d in onnx_route], [d.observation for d in torch_route])
    assert [d.target_position for d in onnx_route] == [d.target_position for d in torch_route]


def test_the_window_is_recorded_only_where_it_was_after_the_flag_existed() -> None:
    """A fingerprint and a state record the settings less a window without feature columns and less one
    of 256 bars, the default before 1,024: the settings of a policy written before the flag existed are
    the ones recorded then (the fingerprint pinned in test_ema_policy), and read back as they trained."""
    assert "feature_window" not in env_settings(EnvConfig())
    featured = EnvConfig(features="a")
    assert env_settings(featured)["feature_window"] == FEATURE_WINDOW == 1024
    assert "feature_window" not in env_settings(dataclasses.replace(featured, feature_window=256))
    recorded = env_settings(dataclasses.replace(featured, feature_window=256))
    assert migrate_env(recorded, 1, "a format-1 model")["feature_window"] == 256
    assert migrate_env(env_settings(EnvConfig()), 1, "a format-1 model")["feature_window"] == FEATURE_WINDOW


# ----------------------------------------------------------------------------- several windows

WINDOWS = "8,24"  # a run's --feature-window with two windows: each column one z-score per window


@pytest.fixture(scope="module")
def windows_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prices.csv and a tiny model trained on it with --feature-window 8,24."""
    cwd = tmp_path_factory.mktemp("feature-windows")
    write_featured_prices(cwd / "prices.csv")
    result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval", "8",
                            "--features", FEATURES, "--feature-window", WINDOWS)
    assert result.returncode == 0, result.output
    return cwd


def test_several_windows_stream_the_backtests_observations_column_by_column(windows_run: Path) -> None:
    agent, config = load_policy(windows_run / "checkpoints" / "best.pt")
    env, W = config.env, config.env.window
    assert env.feature_window == WINDOWS and env.feature_windows == (8, 24)
    assert env.obs_dim == W + 3 + 2 * 2 + 1  # two columns x two windows, then the default EMA deviation
    data = load_ohlcv(windows_run / "prices.csv", features=env.feature_names)
    result = backtest_history(agent, env, data)
    decisions = stream_featured(TradingPolicy.load(windows_run / "checkpoints"), data)
    first = max(W, data.first_defined)
    assert np.array_equal([d.target_position for d in decisions][:-1], result.position)
    observations, _ = backtest_observations(agent, env, data, first - W, result.position)
    got = np.array([d.observation for d in decisions])
    assert np.array_equal(got, observations)
    # column j's window k at W + 3 + 2j + k: the single-window z-scores side by side
    z8, z24 = feature_zscores(data.features, 8)[first:], feature_zscores(data.features, 24)[first:]
    assert np.array_equal(got[:, W + 3:W + 7], np.stack([z8[:, 0], z24[:, 0], z8[:, 1], z24[:, 1]], axis=1))


def test_several_windows_predict_takes_evaluates_positions_and_a_state_keeps_the_longest(
        windows_run: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    check_decisions_follow_evaluate(windows_run, capsys, tmp_path, None, first_bar=VOL_WARMUP)
    saved = check_state_matches_scratch(windows_run, capsys, tmp_path, (VOL_WARMUP + 1, VOL_WARMUP + 2, 90))
    assert saved["features"]["window"] == WINDOWS and len(saved["features"]["rows"]) == 24
    assert saved["policy"]["env"]["feature_window"] == WINDOWS
    policy = TradingPolicy.load(windows_run / "checkpoints")
    other = seal({**saved, "features": {**saved["features"], "window": 24}})
    with pytest.raises(UsageError, match=r"other constants: window 24 \(now '8,24'\)"):
        policy.load_state_dict(other)


def test_several_windows_onnx_records_them_and_takes_the_checkpoints_decisions(windows_run: Path,
                                                                                tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import onnx

    from ppo_lstm.deploy.onnx_model import spec_of

    model = tmp_path / "policy.onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert export_onnx.main(["--checkpoint", str(windows_run / "checkpoints"), "--onnx", str(model)]) == 0
    assert "features vol_z,Mom over windows 8,24" in printed.getvalue()
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    assert meta["feature_window"] == WINDOWS and json.loads(meta["env"])["feature_window"] == WINDOWS
    assert meta["obs_dim"] == str(8 + 3 + 4 + 1) and "[W+3+j*K+i]" in meta["observation"]
    assert spec_of(meta, "m").env.feature_windows == (8, 24)
    with pytest.raises(ValueError, match=r"observation constants \(feature_window\)"):
        spec_of({**meta, "feature_window": "24"}, "m")
    data = load_ohlcv(windows_run / "prices.csv", features=("vol_z", "Mom"))
    onnx_route = stream_featured(TradingPolicy.from_onnx(model), data)
    torch_route = stream_featured(TradingPolicy.load(windows_run / "checkpoints"), data)
    assert np.array_equal([d.observation for d in onnx_route], [d.observation for d in torch_route])
    assert [d.target_position for d in onnx_route] == [d.target_position for d in torch_route]


def test_one_window_is_recorded_as_before_and_several_as_their_text() -> None:
    """"512" and 512 are one setting, recorded as the int (a fingerprint of a single window is today's);
    several windows are recorded as their text."""
    assert env_settings(EnvConfig(features="a", feature_window="512")) == \
        env_settings(EnvConfig(features="a", feature_window=512))
    assert env_settings(EnvConfig(features="a", feature_window=" 8, 24"))["feature_window"] == WINDOWS
    assert "feature_window" not in env_settings(EnvConfig(features="a", feature_window="256"))
