"""--ema-spans: the rule against pandas, its scale, the observation on simulated and historical
markets, a run end to end (train, evaluate, resume), and bad input."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, cli_in_process, load_state
from envs.config import EnvConfig
from envs.data import load_ohlcv
from envs.ema_deviation import EMA_CLIP, EmaLevels, ema_deviations, parse_ema_spans
from envs.observation import rolling_rms
from envs.vector import VectorTradingEnv
from test_features import write_prices

WINDOW, LENGTH = 8, 16  # TINY's


def test_spans_parse_and_bad_ones_say_how_to_fix_them():
    assert parse_ema_spans(None) == () and parse_ema_spans(" ") == () and parse_ema_spans(" None ") == ()
    assert parse_ema_spans("200") == (200,) and parse_ema_spans(" 64, 200 ") == (64, 200)
    for text, message in [("1", "must be 2..100000"), ("20,x", "'x' is not a whole number"),
                          ("20,20", "the span 20 twice"), ("2.5", "not a whole number")]:
        with pytest.raises(ValueError, match=message):
            parse_ema_spans(text)
    assert EnvConfig(ema_spans="64,200").obs_dim == EnvConfig(ema_spans="none").obs_dim + 2
    assert EnvConfig().spans == (500,) and EnvConfig().obs_dim == EnvConfig(ema_spans=None).obs_dim + 1


def test_levels_are_pandas_ewm_with_adjust_false():
    rng = np.random.default_rng(0)
    x = np.cumsum(0.01 * rng.standard_normal((300, 3)), axis=0)  # 3 series: x[0] plays the first open
    levels = EmaLevels((5, 64, 200), x[0])
    got = np.stack([levels.push(row).copy() for row in x[1:]])  # [299, 3, E]
    for e, span in enumerate((5, 64, 200)):
        want = pd.DataFrame(x).ewm(span=span, adjust=False).mean().to_numpy()[1:]
        np.testing.assert_allclose(got[:, :, e], want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("series", [1, 7])
def test_the_bulk_rule_is_the_streaming_update_bit_for_bit(series):
    """A file (one series, Python floats) and simulated episodes (many) give the bits that
    :class:`EmaLevels` fed one bar at a time gives, as a live policy feeds it."""
    rng = np.random.default_rng(series)
    W, spans = 16, (3, 40, 900)
    close = 20.0 * np.exp(np.cumsum(0.02 * rng.standard_normal((500, series)), axis=0))
    first = close[0] * np.exp(0.01 * rng.standard_normal(series))
    rms = np.stack([rolling_rms(close[:, i], W) for i in range(series)], axis=1)
    bulk = ema_deviations(first, close, rms, W, spans)
    levels = EmaLevels(spans, np.log(first))
    for b in range(len(close)):
        levels.push(np.log(close[b]))
        if b >= W:
            np.testing.assert_array_equal(levels.z(np.log(close[b]), rms[b]), bulk[b])


def test_z_is_a_unit_scale_score_on_a_random_walk_and_is_causal():
    """On a random walk of constant volatility z has unit standard deviation (the documented
    scale), whatever the volatility; and it depends on nothing after its bar."""
    rng = np.random.default_rng(1)
    W, spans, bars = 32, (20, 200), 40_000
    stds = []
    for vol in (0.001, 0.05):
        close = 50.0 * np.exp(np.cumsum(vol * rng.standard_normal(bars)))
        z = ema_deviations(close[:1], close[:, None], rolling_rms(close, W)[:, None], W, spans)[:, 0]
        assert np.all(z[:W] == 0) and np.abs(z).max() <= EMA_CLIP
        stds.append(z[2000:].std(axis=0))  # past the start's transient
        cut = ema_deviations(close[:1], close[:5000, None], rolling_rms(close[:5000], W)[:, None], W, spans)
        np.testing.assert_array_equal(cut[:, 0], z[:5000])
    np.testing.assert_allclose(np.array(stds), 1.0, atol=0.08)


def test_simulated_episodes_observe_the_rule_from_their_own_bars():
    config = EnvConfig(market="ou", window=WINDOW, episode_length=LENGTH, ema_spans="10,50")
    env = VectorTradingEnv(6, config)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (6, WINDOW + 5) and env.single_observation_space.contains(obs[0])
    opens, closes = env.core.market.open.copy(), env.core.market.close.copy()  # [N, W+L+1]
    rms = np.stack([rolling_rms(c, WINDOW) for c in closes], axis=1)  # [W+L+1, N]
    want = ema_deviations(opens[:, 0], closes.T, rms, WINDOW, (10, 50))  # [W+L+1, N, E]
    for j in range(LENGTH):
        np.testing.assert_allclose(obs[:, WINDOW + 3:], want[WINDOW + j], rtol=0, atol=2e-5)
        obs, *_ = env.step(np.random.default_rng(j).integers(0, 3, 6))
    # the same seed, the same observations; and the first W+3 entries are the plain env's
    again = VectorTradingEnv(6, config).reset(seed=3)[0]
    plain = VectorTradingEnv(6, EnvConfig(market="ou", window=WINDOW, episode_length=LENGTH, ema_spans="none")
                             ).reset(seed=3)[0]
    np.testing.assert_array_equal(again[:, :WINDOW + 3], plain)
    assert not np.allclose(again[:, WINDOW + 3:], 0.0)


def test_historical_episodes_read_the_files_deviations_after_the_features(tmp_path):
    write_prices(tmp_path / "p.csv", 400)
    data = load_ohlcv(tmp_path / "p.csv", features=("Sig",))
    close = np.asarray(data.close, dtype=np.float64)
    want = ema_deviations(np.asarray(data.open[:1], dtype=np.float64), close[:, None],
                          rolling_rms(close, WINDOW)[:, None], WINDOW, (30,))[:, 0]  # [bars, 1]
    config = EnvConfig(window=WINDOW, episode_length=LENGTH, features="Sig", ema_spans="30")
    env = VectorTradingEnv(8, config, data=data)
    obs, _ = env.reset(seed=2)
    start = env.core.start.copy()
    for j in range(LENGTH):
        np.testing.assert_array_equal(obs[:, -1:], want[start + WINDOW + j])
        obs, *_ = env.step(np.zeros(8, np.int64))
    plain = VectorTradingEnv(8, EnvConfig(window=WINDOW, episode_length=LENGTH, features="Sig", ema_spans="none"),
                             data=data)
    np.testing.assert_array_equal(plain.reset(seed=2)[0], VectorTradingEnv(8, config, data=data).reset(seed=2)[0][:, :-1])


def test_train_evaluate_and_resume_with_ema_spans(tmp_path):
    from ppo_lstm.evaluation.cli import main as evaluate_main

    result = cli_in_process(tmp_path, *TINY, "--ema-spans", "20,100", "--episodes", "16", "--checkpoint-interval", "8")
    assert result.returncode == 0, result.output
    state = load_state(tmp_path / "checkpoints" / "best.pt")
    assert state["config"]["env"]["ema_spans"] == "20,100"
    assert state["model"]["encoder.0.weight"].shape[1] == WINDOW + 5
    assert evaluate_main(["--checkpoint", str(tmp_path / "checkpoints" / "best.pt"), "--episodes", "4"]) == 0
    resumed = cli_in_process(tmp_path, *TINY, "--resume", "--episodes", "24")
    assert resumed.returncode == 0, resumed.output
    assert load_state(tmp_path / "checkpoints" / "checkpoint_u00000012.pt")["config"]["env"]["ema_spans"] == "20,100"


def test_a_run_saved_before_ema_spans_resumes_and_evaluates_without_the_entry(tmp_path):
    """A checkpoint whose config has no ema_spans and no feature_window (written before them) is a run
    without the EMA entry: it resumes with no change of settings and evaluates, under the default of 500."""
    import torch

    from ppo_lstm.evaluation.cli import main as evaluate_main

    first = cli_in_process(tmp_path, *TINY, "--ema-spans", "none", "--episodes", "16", "--checkpoint-interval", "8")
    assert first.returncode == 0, first.output
    for path in (tmp_path / "checkpoints").glob("*.pt"):  # as an older version wrote it
        state = torch.load(path, weights_only=True)
        assert state["config"]["env"]["ema_spans"] is None
        del state["config"]["env"]["ema_spans"], state["config"]["env"]["feature_window"]
        del state["config"]["batch_rule"], state["counters"]["train_seconds"]
        state["format"] = 1
        torch.save(state, path)
    again = cli_in_process(tmp_path, *TINY, "--resume", "--episodes", "24")
    assert again.returncode == 0 and "Resumed from " in again.stdout, again.output
    assert "ema-spans" not in again.stdout and "warning" not in again.output  # no change: its own envs go on
    state = load_state(tmp_path / "checkpoints" / "checkpoint_u00000012.pt")
    assert state["config"]["env"]["ema_spans"] is None and state["model"]["encoder.0.weight"].shape[1] == WINDOW + 3
    assert evaluate_main(["--checkpoint", str(tmp_path / "checkpoints" / "best.pt"), "--episodes", "4"]) == 0
    other = cli_in_process(tmp_path, *TINY, "--resume", "--episodes", "32", "--ema-spans", "200")
    assert other.returncode == 2 and len(other.error_lines()) == 1, other.output  # the sizes name the spans
    assert "--lstm-size 16 --window 8 --max-position 1 --ema-spans none, but this run asks for" in other.stderr
    assert other.stderr.rstrip().endswith("--ema-spans 200; use the checkpoint's sizes or another --checkpoint-dir")


def test_a_bad_span_is_one_line_exit_2(tmp_path):
    for spans, message in [("1", "a span must be 2..100000 bars, got 1"), ("a", "'a' is not a whole number")]:
        result = cli_in_process(tmp_path, *TINY, "--episodes", "4", "--checkpoint-dir", "none", "--ema-spans", spans)
        assert result.returncode == 2 and len(result.error_lines()) == 1, result.output
        assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "none").exists()


def test_a_restored_state_continues_bit_for_bit():
    import pickle

    config = EnvConfig(market="mixed", window=WINDOW, episode_length=LENGTH, ema_spans="12,300")
    env = VectorTradingEnv(5, config)
    env.reset(seed=4)
    actions = np.random.default_rng(2).integers(0, 3, (40, 5))
    for a in actions[:9]:
        env.step(a)
    state = pickle.loads(pickle.dumps(env.get_state()))
    want = [env.step(a)[0] for a in actions[9:]]  # crosses episode ends: fresh episodes' deviations too
    other = VectorTradingEnv(5, config)
    other.set_state(state)
    for a, obs in zip(actions[9:], want):
        np.testing.assert_array_equal(other.step(a)[0], obs)
