"""The streaming policy of a model trained with --ema-spans: bar by bar, from a file's first bar, its
observations' EMA deviations are the historical market's bit for bit and its decisions the backtest's;
the EMAs round-trip exactly through the state; states and settings of other spans are refused in one
line; a state and a fingerprint of a policy without spans are the ones recorded before spans existed."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from deploy_fixtures import EMA_SPANS, backtest_observations, ema_run, stream
from envs.config import EnvConfig
from envs.data import MarketData, date_span, load_ohlcv
from envs.ema_deviation import EmaLevels, ema_deviations
from envs.observation import rolling_rms
from ppo_lstm import TradingPolicy
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.config.migrate import migrate_settings
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.deploy.spec import PolicySpec
from ppo_lstm.deploy.torch_step import TorchStep, checkpoint_fingerprint
from ppo_lstm.deploy.state import seal
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.evaluation.loading import load_policy


@pytest.fixture(scope="module")
def ema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared run trained with --ema-spans 5,40 on prices.csv (read only)."""
    return ema_run(tmp_path_factory)


def file_deviations(data: MarketData, window: int, spans: tuple[int, ...]) -> np.ndarray:
    """z [n, E] of a whole file, as ``HistoricalMarket`` computes it (EMAs from the file's first open)."""
    c = np.asarray(data.close, dtype=np.float64)
    o = np.asarray(data.open, dtype=np.float64)
    return ema_deviations(o[:1], c[:, None], rolling_rms(c, window)[:, None], window, spans)[:, 0]


def head(data: MarketData, n: int) -> MarketData:
    """``data``'s first ``n`` bars."""
    cut = {k: getattr(data, k)[:n] for k in ("timestamps", "open", "high", "low", "close", "volume")}
    return dataclasses.replace(data, **cut)


def untrained(env: EnvConfig, fingerprint: str = "same") -> TradingPolicy:
    """A policy of an untrained agent (seed 0) for ``env``, with the given fingerprint."""
    torch.manual_seed(0)
    return TradingPolicy.from_agent(RecurrentActorCritic(env.obs_dim, env.num_actions, 8, 8), env,
                                    fingerprint=fingerprint)


@pytest.mark.parametrize("start", [None, "2021-03-01"])
def test_ema_stream_takes_the_backtests_decisions_bit_for_bit(ema: Path, start: str | None) -> None:
    data = load_ohlcv(ema / "prices.csv")
    agent, config = load_policy(ema / "checkpoints" / "best.pt")
    env, W = config.env, config.env.window
    assert env.spans == EMA_SPANS and env.obs_dim == W + 3 + 2
    lo, hi = date_span(data, start)
    result = backtest_history(agent, env, data, lo, hi)
    decisions = stream(TradingPolicy.load(ema / "checkpoints"), data, start)
    first = max(lo, W)
    assert len(decisions) == result.bars + 1
    targets = np.array([d.target_position for d in decisions])
    assert np.array_equal(targets[:-1], result.position) and len(set(targets.tolist())) >= 2
    assert np.array_equal([d.equity for d in decisions], result.equity)
    observations, logits = backtest_observations(agent, env, data, first - W, result.position)
    got = np.array([d.observation for d in decisions])
    assert np.array_equal(got, observations)  # the historical market's EMA deviations among them
    assert torch.equal(torch.tensor([d.logits for d in decisions]), logits)
    z = got[:, W + 3:]
    assert np.array_equal(z, file_deviations(data, W, EMA_SPANS)[first:]) and np.abs(z).min() > 0


def test_ema_deviations_bar_by_bar_equal_the_whole_files() -> None:
    """For windows long and short and spans short and long, on bars whose opens gap from the previous
    close, the stream's EMA entries are the whole file's, bit for bit, at every decision."""
    rng = np.random.default_rng(4)
    bars = 160
    close = np.round(30.0 * np.exp(np.cumsum(0.015 * rng.standard_normal(bars))), 2)
    open_ = np.round(np.r_[29.5, close[:-1]] * np.exp(0.004 * rng.standard_normal(bars)), 2)
    data = MarketData(source="walk", timestamps=np.datetime64("2024-01-01") + np.arange(bars).astype("m8[D]"),
                      open=open_, high=np.maximum(open_, close), low=np.minimum(open_, close), close=close,
                      volume=np.zeros(bars), bar_seconds=86400.0)
    for window, spans in ((2, (2,)), (5, (3, 300)), (17, (64, 9, 2)), (32, (200,))):
        env = EnvConfig(window=window, episode_length=16, ema_spans=",".join(map(str, spans)))
        decisions = stream(untrained(env), data)
        assert len(decisions) == bars - window
        z = np.array([d.observation[window + 3:] for d in decisions])
        assert np.array_equal(z, file_deviations(data, window, spans)[window:]), (window, spans)


@pytest.mark.parametrize("cut", [3, 9, 150])
def test_ema_state_round_trips_exactly(ema: Path, tmp_path: Path, cut: int) -> None:
    """A state saved after ``cut`` bars (3: fewer than the window, no decision; 9: the first decision;
    150: mid-stream) holds the file's EMA levels exactly, and continues as the whole stream does."""
    data = load_ohlcv(ema / "prices.csv")
    whole = stream(TradingPolicy.load(ema / "checkpoints"), data)
    first = TradingPolicy.load(ema / "checkpoints")
    first.warm_up(head(data, cut))
    first.save_state(tmp_path / "state.json")
    state = json.loads((tmp_path / "state.json").read_text())
    levels = EmaLevels(EMA_SPANS, np.log(np.asarray(data.open[:1], dtype=np.float64)))
    for b in range(cut):
        levels.push(np.log(np.asarray(data.close[b:b + 1], dtype=np.float64)))
    assert state["ema"] == {"spans": list(EMA_SPANS), "clip": 5.0, "levels": levels.level[0].tolist()}
    assert state["policy"]["ema_spans"] == list(EMA_SPANS) and state["policy"]["env"]["ema_spans"] == "5,40"
    resumed = TradingPolicy.load(ema / "checkpoints")
    resumed.load_state(tmp_path / "state.json")
    assert resumed.state_dict() == first.state_dict()
    rest = [resumed.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i],
                           data.volume[i]) for i in range(cut, len(data))]
    assert [d for d in rest if d is not None] == whole[-(len(data) - max(cut, 8)):]


def test_ema_states_and_settings_that_do_not_fit_are_refused(ema: Path) -> None:
    data = load_ohlcv(ema / "prices.csv")
    policy = TradingPolicy.load(ema / "checkpoints")
    policy.warm_up(head(data, 100))
    state = policy.state_dict()
    entry = state["ema"]
    fresh = TradingPolicy.load(ema / "checkpoints")
    for broken, match in (({**entry, "spans": [5]}, r"its EMA spans \[5\] are not the policy's \[5, 40\]"),
                          ({**entry, "clip": 3.0}, r"the state's EMAs have another clip: 3\.0 \(now 5\.0\)"),
                          ({**entry, "levels": entry["levels"][:1]}, "are not 2 finite numbers"),
                          ({**entry, "levels": None}, "EMA levels are missing after 100 bars"),
                          (None, "no 'ema' entry: the policy reads the EMA deviations of --ema-spans 5,40")):
        with pytest.raises(UsageError, match=match) as err:
            fresh.load_state_dict({**state, "ema": broken})
        assert "\n" not in str(err.value) and fresh.bars == 0  # one line, and the stream is left fresh
    for policy_entry, match in (({**state["policy"], "ema_spans": [5]}, r"EMA spans \[5\] are not this policy's"),
                                ({k: v for k, v in state["policy"].items() if k != "ema_spans"},
                                 r"EMA spans None are not this policy's \[5, 40\]")):
        with pytest.raises(UsageError, match=match):
            fresh.load_state_dict(seal({**state, "policy": policy_entry}))
    assert fresh.load_state_dict(state) == 2 and fresh.state_dict() == state
    # a policy of other spans (or none) with the same fingerprint: its state is refused, and so is an env
    # whose spans are not the policy's
    env = EnvConfig(window=8, episode_length=16, ema_spans="5,40")
    for other in (dataclasses.replace(env, ema_spans="5"), dataclasses.replace(env, ema_spans=None)):
        source = untrained(other)
        source.warm_up(head(data, 30))
        with pytest.raises(UsageError, match=r"the state's EMA spans \[(5)?\] are not this policy's \[5, 40\]"):
            untrained(env).load_state_dict(source.state_dict())
    spec = PolicySpec(env=env, lstm_size=8, fingerprint="x", source="m.pt")
    with pytest.raises(UsageError, match=r"m.pt: the policy's EMA spans \[5, 40\] are not its env's \[40, 5\]"):
        TradingPolicy(spec, TorchStep(RecurrentActorCritic(env.obs_dim, env.num_actions, 8, 8)),
                      dataclasses.replace(env, ema_spans="40,5"))


def test_a_policy_without_spans_keeps_its_fingerprint_and_older_states() -> None:
    """Without --ema-spans the fingerprint is the one recorded before the setting existed (fixed weights,
    the value this version's predecessor computed), and a state written then (no EMA entries) is read."""
    config = TrainConfig(env=EnvConfig(window=4, episode_length=16, ema_spans="none"), hidden_size=8, lstm_size=8)
    agent = RecurrentActorCritic(config.env.obs_dim, config.env.num_actions, 8, 8)
    with torch.no_grad():
        for i, (_, weight) in enumerate(sorted(agent.named_parameters())):
            weight.copy_(torch.linspace(-1, 1, weight.numel()).reshape(weight.shape) * (i + 1) / 10)
    assert checkpoint_fingerprint(agent, config) == "a3116edebc8189f337b3ab14fdd7c9a073481658353302414daf64001946ef80"
    # a checkpoint's config saved before --ema-spans and --feature-window existed reads as no spans
    older = {k: v for k, v in config.env.__dict__.items() if k not in ("ema_spans", "feature_window")}
    saved = {k: v for k, v in config.to_dict().items() if k != "batch_rule"}
    read = TrainConfig.from_dict(migrate_settings({**saved, "env": older}, 1, "a format-1 checkpoint"))
    assert read.env == dataclasses.replace(config.env, ema_spans=None)
    assert checkpoint_fingerprint(agent, read) == checkpoint_fingerprint(agent, config)
    spanned = dataclasses.replace(config, env=dataclasses.replace(config.env, ema_spans="5"))
    assert checkpoint_fingerprint(agent, spanned) != checkpoint_fingerprint(agent, config)

    rng = np.random.default_rng(2)
    close = np.round(50.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(60))), 2)
    data = MarketData(source="walk", timestamps=pd.date_range("2024-01-01", periods=60).to_numpy(), open=close,
                      high=close, low=close, close=close, volume=np.zeros(60), bar_seconds=86400.0)
    policy = untrained(config.env)
    whole = stream(policy, data)
    policy.warm_up(head(data, 40))
    state = policy.state_dict()
    assert "ema_spans" not in state["policy"]["env"]
    older = {k: v for k, v in state.items() if k != "ema"}  # as written before spans existed
    older["policy"] = {k: v for k, v in state["policy"].items() if k != "ema_spans"}
    resumed = untrained(config.env)
    assert resumed.load_state_dict(seal(older)) == 2
    rest = [resumed.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i])
            for i in range(40, 60)]
    assert rest == whole[-20:]


def test_settled_bars_is_when_a_late_started_ema_reads_as_one_started_at_the_first_bar() -> None:
    """Two EMAs of one path, one from bar 0 and one from bar 300: settled_bars after the later start they
    differ by at most START_WEIGHT of their difference at that start, and one bar earlier by more."""
    from envs.ema_deviation import START_WEIGHT, settled_bars
    log_close = np.cumsum(np.random.default_rng(4).standard_normal(5000) * 0.01)
    for span in (5, 40, 500):
        need = settled_bars(span)
        early, late = EmaLevels((span,), log_close[:1]), EmaLevels((span,), log_close[300:301])
        for x in log_close[:300]:
            early.push(x)
        start = abs(float(early.level[0, 0] - late.level[0, 0]))
        gaps = [abs(float(early.push(x)[0, 0] - late.push(x)[0, 0])) for x in log_close[300:300 + need]]
        assert start > 0 and gaps[-1] <= START_WEIGHT * start * (1 + 1e-9) < gaps[-2], span


def test_a_warm_up_too_short_for_the_emas_is_warned_of(tmp_path: Path) -> None:
    env = EnvConfig(window=4, episode_length=16, ema_spans="5,40")
    rng = np.random.default_rng(3)
    close = np.round(50.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(400))), 2)
    data = MarketData(source="walk", timestamps=pd.date_range("2024-01-01", periods=400).to_numpy(), open=close,
                      high=close, low=close, close=close, volume=np.zeros(400), bar_seconds=86400.0)
    policy = untrained(env)
    with pytest.warns(UserWarning, match=r"the history has 60 bars, fewer than the 93 an EMA of span 40"):
        policy.warm_up(head(data, 60))
    assert policy.warm_up_warning is not None and "warm up on at least 93 bars" in policy.warm_up_warning
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all
        policy.warm_up(head(data, 93))
    assert policy.warm_up_warning is None
