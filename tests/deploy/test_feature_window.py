"""--feature-window: a model trained with a 24-bar feature z-score streams the backtest's decisions bit
for bit, its state keeps 24 rows and round-trips, a state of another window is refused in one line, the
ONNX metadata records the window and the ONNX policy takes the checkpoint's decisions; a policy that
leaves the window at its default keeps the fingerprint settings recorded before the flag existed."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY, cli_in_process
from deploy_fixtures import FEATURES, backtest_observations, write_featured_prices
from envs.config import EnvConfig
from envs.data import load_ohlcv
from envs.data.features import FEATURE_WINDOW, feature_zscores
from ppo_lstm import TradingPolicy
from ppo_lstm.config.migrate import migrate_env
from ppo_lstm.deploy import export_onnx
from ppo_lstm.deploy.spec import env_settings
from ppo_lstm.deploy.state import seal
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.evaluation.loading import load_policy
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
