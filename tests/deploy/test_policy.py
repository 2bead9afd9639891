"""The streaming policy (ppo_lstm.deploy.policy.TradingPolicy): bar by bar it takes the backtest's decisions
bit for bit (observations, logits, positions, equity), from any --start; its state round-trips
exactly through JSON; fill() changes the book; busts stay flat; bad bars and states are refused."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from deploy_fixtures import VOL_WARMUP, backtest_observations, featured_run, stream, train_tiny
from envs.config import EnvConfig
from envs.data import MarketData, date_span, load_ohlcv
from envs.data.features import FEATURE_WINDOW, feature_zscores
from envs.observation import normalised_returns
from ppo_lstm import TradingPolicy
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.loading import load_policy
from ppo_lstm.deploy.policy import Decision


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with prices.csv and a tiny model trained on it with max position 2 (the FIFO book)."""
    cwd = tmp_path_factory.mktemp("policy")
    train_tiny(cwd, "--max-position", "2", "--fee-bps", "3", "--slippage-bps", "2")
    return cwd


@pytest.mark.parametrize("start", [None, "2021-03-01"])
def test_stream_takes_the_backtests_decisions_bit_for_bit(run: Path, start: str | None) -> None:
    data = load_ohlcv(run / "prices.csv")
    agent, config = load_policy(run / "checkpoints" / "best.pt")
    lo, hi = date_span(data, start)
    result = backtest_history(agent, config.env, data, lo, hi)
    decisions = stream(TradingPolicy.load(run / "checkpoints"), data, start)
    W = config.env.window
    first = max(lo, W)  # the first bar at or after start, unless the file has fewer than W bars before it
    assert (first == lo) == (start is not None)
    assert len(decisions) == result.bars + 1  # one decision per bar from first, the last one for the next bar
    assert [d.time for d in decisions] == [pd.Timestamp(t) for t in data.timestamps[first:]]
    targets = np.array([d.target_position for d in decisions])
    assert np.array_equal(targets[:-1], result.position)
    assert len(set(targets.tolist())) >= 2  # the policy trades
    assert np.array_equal([d.equity for d in decisions], result.equity)  # the book, bit for bit
    assert np.array_equal([d.position for d in decisions[1:]], result.position)
    observations, logits = backtest_observations(agent, config.env, data, first - W, result.position)
    assert np.array_equal(np.array([d.observation for d in decisions]), observations)
    assert torch.equal(torch.tensor([d.logits for d in decisions]), logits)


def test_warm_up_from_a_file_a_dataframe_or_bars_is_the_same_stream(run: Path) -> None:
    policy = TradingPolicy.load(run / "checkpoints")
    data = load_ohlcv(run / "prices.csv")
    states = []
    for source in (run / "prices.csv", str(run / "prices.csv"), pd.read_csv(run / "prices.csv"),
                   pd.read_csv(run / "prices.csv", index_col="Date"), data):
        decision = policy.warm_up(source, start="2021-02-15")
        assert decision is not None and decision.time == pd.Timestamp(data.timestamps[-1])
        states.append(policy.state_dict())
    assert all(state == states[0] for state in states[1:])
    assert stream(policy, data, "2021-02-15")[-1] == policy.decision


def test_state_round_trips_exactly_through_json_mid_stream(run: Path, tmp_path: Path) -> None:
    data = load_ohlcv(run / "prices.csv")
    whole = stream(TradingPolicy.load(run / "checkpoints"), data, "2021-02-01")
    cut = 150
    first = TradingPolicy.load(run / "checkpoints")
    first.warm_up(MarketData(**{**{f.name: getattr(data, f.name) for f in dataclasses.fields(data)},
                                **{k: getattr(data, k)[:cut] for k in ("timestamps", "open", "high", "low",
                                                                       "close", "volume")}}), "2021-02-01")
    first.save_state(tmp_path / "state.json")
    state = json.loads((tmp_path / "state.json").read_text())  # plain JSON: nothing to unpickle
    assert state == json.loads(json.dumps(first.state_dict()))
    resumed = TradingPolicy.load(run / "checkpoints")
    resumed.load_state(tmp_path / "state.json")
    assert resumed.state_dict() == first.state_dict()
    resumed.verify_history(data)  # the file starts with the bars the state consumed
    rest = [resumed.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i],
                           data.volume[i]) for i in range(cut, len(data))]
    assert rest == whole[-len(rest):]  # logits, value, equity and observation: equal, not close


def test_normalised_returns_bar_by_bar_equal_the_whole_files(tmp_path: Path) -> None:
    """The stream's returns window equals ``normalised_returns`` on the whole file, bit for bit, for
    windows long and short (the file's first W bars share its first full window's RMS)."""
    rng = np.random.default_rng(3)
    bars = 140
    close = np.round(30.0 * np.exp(np.cumsum(0.015 * rng.standard_normal(bars))), 2)
    data = MarketData(source="walk", timestamps=np.datetime64("2024-01-01") + np.arange(bars).astype("m8[D]"),
                      open=close, high=close, low=close, close=close, volume=np.zeros(bars), bar_seconds=86400.0)
    for window in (2, 5, 17, 32):
        env = EnvConfig(window=window, episode_length=16)
        torch.manual_seed(0)
        policy = TradingPolicy.from_agent(RecurrentActorCritic(env.obs_dim, env.num_actions, 8, 8), env)
        z = normalised_returns(close, window)  # z[b-1]: bar b
        decisions = stream(policy, data)
        assert len(decisions) == bars - window
        for k, decision in enumerate(decisions):
            bar = window + k
            assert np.array_equal(decision.observation[:window], z[bar - window:bar]), (window, bar)


def test_fill_books_the_reported_fill(run: Path) -> None:
    data = load_ohlcv(run / "prices.csv")
    policy = TradingPolicy.load(run / "checkpoints")
    env = policy.env
    decisions = stream(policy, data)
    lo_close = data.close[env.window]  # the first decision bar's close: one lot = cash / (K * it)
    units = env.initial_cash / (env.max_position * lo_close)
    W = env.window
    # replay to bar cut - 1, where the book is 2 lots long, then report a fill of 2 short lots at our own price
    cut = next(W + k + 1 for k, d in enumerate(decisions) if k > 50 and d.position == 2)
    policy.warm_up(data_head(data, cut))
    assert policy.decision == decisions[cut - 1 - W]
    before_equity = policy.equity
    assert policy.position == 2
    price = float(data.open[cut]) * 1.01
    policy.fill(price, -2)
    decision = policy.update(data.timestamps[cut], data.open[cut], data.high[cut], data.low[cut], data.close[cut])
    close, fee = float(data.close[cut]), env.fee_bps / 1e4
    assert decision.position == policy.position == -2
    assert decision.observation[W] == -1.0  # -2 lots / K
    upnl = -2 * (close - price) * units  # both short lots entered at the reported price, no slippage added
    assert decision.observation[W + 1] == pytest.approx(upnl / env.initial_cash * 10.0, rel=1e-5)
    assert decision.observation[W + 2] == np.float32(1.0 / env.episode_length)  # a new position, held 1 bar
    # 4 lots sold at the price less the fee: 2 closing the longs (marked at bar cut-1's close), 2 opening shorts
    sold = 4 * units * price * (1.0 - fee)
    expected = before_equity - 2 * units * data.close[cut - 1] + sold - 2 * units * close
    assert decision.equity == pytest.approx(expected, rel=1e-12)
    # a fill at the price the book assumes gives the default book bit for bit
    policy.warm_up(data_head(data, cut))
    target = decisions[cut - 1 - W].target_position
    move = np.sign(target - policy.position)
    policy.fill((move * (env.slippage_bps / 1e4) + 1.0) * data.open[cut], target)
    same = policy.update(data.timestamps[cut], data.open[cut], data.high[cut], data.low[cut], data.close[cut],
                         data.volume[cut])
    assert same == decisions[cut - W]


def data_head(data: MarketData, n: int) -> MarketData:
    """The first ``n`` bars of ``data`` (and of its feature columns)."""
    head = {k: getattr(data, k)[:n] for k in ("timestamps", "open", "high", "low", "close", "volume")}
    return dataclasses.replace(data, **head, features=None if data.features is None else data.features[:n])


def test_a_bust_account_is_kept_flat() -> None:
    """A short position through a tripling price ends at equity <= 0: every later decision is flat."""
    env = EnvConfig(window=4, episode_length=8, max_position=1)
    torch.manual_seed(1)
    policy = TradingPolicy.from_agent(RecurrentActorCritic(env.obs_dim, env.num_actions, 8, 8), env)
    prices = [10.0, 10.2, 10.1, 10.3, 10.2, 10.4, 31.0, 30.0, 29.0, 28.0]
    times = pd.date_range("2024-01-01", periods=len(prices))
    decisions = []
    for i, p in enumerate(prices):
        if policy.decision is not None and i == 5:
            policy.fill(10.4, -1)  # short one lot (the whole cash) at bar 5's open
        decisions.append(policy.update(times[i], p, p, p, p))
    assert decisions[3] is None and decisions[4] is not None  # the first decision at bar W
    assert not decisions[5].bust and decisions[5].position == -1
    assert decisions[6].bust and decisions[6].equity <= 0.0
    assert all(d.bust and d.target_position == 0 for d in decisions[6:])
    assert all(d.position == 0 for d in decisions[7:])


def test_bad_bars_fills_and_states_are_refused(run: Path) -> None:
    policy = TradingPolicy.load(run / "checkpoints")
    with pytest.raises(UsageError, match="no decision has been taken"):
        policy.fill(100.0, 1)
    policy.update("2024-01-02", 10.0, 10.5, 9.5, 10.2, 100)
    for bad, match in ((("2024-01-02", 10, 10, 10, 10), "not after the last bar"),
                       (("2024-01-03", 10, 10, 10, -1.0), "finite and > 0"),
                       (("2024-01-03", 10, 10, 10, float("nan")), "finite and > 0"),
                       (("2024-01-03", 10, 10, 10, 10, -5), "volume"),
                       (("someday", 10, 10, 10, 10), "not a time")):
        with pytest.raises(UsageError, match=match):
            policy.update(*bad)
    assert policy.bars == 1
    policy.warm_up(run / "prices.csv")
    for price, lots in ((0.0, 1), (100.0, 3), (100.0, 0.5)):
        with pytest.raises(UsageError):
            policy.fill(price, lots)
    with pytest.raises(UsageError, match="start is set before the first bar"):
        policy.begin("2021-01-01")
    state = policy.state_dict()
    cheaper = TradingPolicy.load(run / "checkpoints", fee_bps=0.0)
    with pytest.raises(UsageError, match="other settings: fee_bps"):
        cheaper.load_state_dict(state)
    other = TradingPolicy.load(run / "checkpoints")
    other.spec = dataclasses.replace(other.spec, fingerprint="0" * 64)
    with pytest.raises(UsageError, match="another policy"):
        other.load_state_dict(state)
    for broken in ({**state, "window": state["window"][:-1]}, {**state, "lstm": {"h": [], "c": []}},
                   {**state, "digest": "xyz"}, {**state, "decision": {}}, {**state, "format": "other"}):
        fresh = TradingPolicy.load(run / "checkpoints")
        with pytest.raises(UsageError):
            fresh.load_state_dict(broken)
        assert fresh.bars == 0  # nothing half-restored


# ----------------------------------------------------------------------------- feature columns


@pytest.fixture(scope="module")
def featured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prices.csv with the indicator columns Vol_Z and mom (leading NaN rows) and a tiny model
    trained on it with --features vol_z,Mom (shared by the deploy tests; read only)."""
    return featured_run(tmp_path_factory)


def feature_values(data: MarketData, i: int, spell=str.upper) -> dict[str, float]:
    """Bar ``i``'s raw feature values by name, spelled otherwise than at training (names match in any case)."""
    return {spell(name): float(v) for name, v in zip(data.feature_names, data.features[i])}


def stream_featured(policy: TradingPolicy, data: MarketData, start: str | None = None, first: int = 0
                    ) -> list[Decision]:
    """Every decision of ``policy`` fed bars ``first..`` one at a time through ``update(..., features=)``
    (from a fresh stream when ``first`` is 0); NaN and None both mark a value not there yet."""
    if first == 0:
        policy.reset()
        policy.begin(start)
    decisions = []
    for i in range(first, len(data)):
        values = feature_values(data, i, str.upper if i % 2 else str.lower)
        if i % 3 == 0:
            values = {k: (None if np.isnan(v) else v) for k, v in values.items()}
        decision = policy.update(data.timestamps[i], data.open[i], data.high[i], data.low[i], data.close[i],
                                 data.volume[i], features=values)
        if decision is not None:
            decisions.append(decision)
    return decisions


@pytest.mark.parametrize("start", [None, "2021-01-15", "2021-03-01"])
def test_featured_stream_takes_the_backtests_decisions_bit_for_bit(featured: Path, start: str | None) -> None:
    """With feature columns whose first 30 rows are NaN: decisions begin where every feature is
    defined (bar 30) unless --start puts them later (2021-03-01: bar 41), as in backtest_history."""
    agent, config = load_policy(featured / "checkpoints" / "best.pt")
    env, W = config.env, config.env.window
    assert env.feature_names == ("vol_z", "Mom") and env.obs_dim == W + 6  # + the default EMA(500) deviation
    data = load_ohlcv(featured / "prices.csv", features=env.feature_names)
    assert data.first_defined == VOL_WARMUP
    lo, hi = date_span(data, start)
    first = max(lo, W, data.first_defined)  # the first decision bar
    assert (first == VOL_WARMUP) == (start != "2021-03-01")
    result = backtest_history(agent, env, data, lo, hi)
    decisions = stream_featured(TradingPolicy.load(featured / "checkpoints"), data, start)
    assert len(decisions) == result.bars + 1 == len(data) - first
    assert [d.time for d in decisions] == [pd.Timestamp(t) for t in data.timestamps[first:]]
    targets = np.array([d.target_position for d in decisions])
    assert np.array_equal(targets[:-1], result.position) and len(set(targets.tolist())) >= 2
    assert np.array_equal([d.equity for d in decisions], result.equity)
    observations, logits = backtest_observations(agent, env, data, first - W, result.position)
    got = np.array([d.observation for d in decisions])
    assert np.array_equal(got, observations)
    assert torch.equal(torch.tensor([d.logits for d in decisions]), logits)
    # the features part is the whole file's rolling z-scores at the decision bars, and not all zero
    assert np.array_equal(got[:, W + 3:W + 5], feature_zscores(data.features)[first:])  # then the EMA's
    assert np.abs(got[:, W + 3:W + 5]).min(axis=0).max() > 0 and not np.isnan(got).any()
    # warm_up from the file loads the feature columns itself: the same last decision
    assert TradingPolicy.load(featured / "checkpoints").warm_up(featured / "prices.csv", start) == decisions[-1]


@pytest.mark.parametrize("cut", [20, 150])
def test_featured_state_round_trips_exactly(featured: Path, tmp_path: Path, cut: int) -> None:
    """A state saved after ``cut`` bars (20: features still NaN, no decision yet; 150: NaN rows
    kept in the normaliser, as null) and resumed bar by bar gives the stream's decisions exactly."""
    data = load_ohlcv(featured / "prices.csv", features=("vol_z", "Mom"))
    whole = stream_featured(TradingPolicy.load(featured / "checkpoints"), data)
    first = TradingPolicy.load(featured / "checkpoints")
    # the loader refuses a column with no value at all: bars that old come as a MarketData
    head = data_head(data, cut) if cut <= VOL_WARMUP else pd.read_csv(featured / "prices.csv").iloc[:cut]
    assert (first.warm_up(head) is None) == (cut <= VOL_WARMUP)
    assert first.undefined_features() == (["vol_z"] if cut <= VOL_WARMUP else [])
    first.save_state(tmp_path / "state.json")
    state = json.loads((tmp_path / "state.json").read_text())
    rows = state["features"]["rows"]
    assert len(rows) == cut and rows[0] == [None, None] and (rows[-1][0] is None) == (cut <= VOL_WARMUP)
    assert (state["features"]["window"], state["features"]["clip"]) == (FEATURE_WINDOW, 5.0)
    resumed = TradingPolicy.load(featured / "checkpoints")
    resumed.load_state(tmp_path / "state.json")
    assert resumed.state_dict() == first.state_dict()
    resumed.verify_history(data)
    rest = stream_featured(resumed, data, first=cut)
    assert rest == whole[-len(rest):] and len(rest) == len(data) - max(cut, VOL_WARMUP)


def test_featured_bad_bars_data_and_states_are_refused(featured: Path, run: Path) -> None:
    policy = TradingPolicy.load(featured / "checkpoints")
    data = load_ohlcv(featured / "prices.csv", features=("vol_z", "Mom"))
    bar = ("2024-01-02", 10.0, 10.5, 9.5, 10.2, 100)
    for features, match in ((None, "pass them as update(..., features={'vol_z': ..., 'Mom': ...})"),
                            ({"vol_z": 1.0}, "no value for 'Mom'"),
                            ({"vol_z": 1.0, "mom": 2.0, "rsi": 3.0}, "unknown column(s) 'rsi'"),
                            ({"vol_z": 1.0, "VOL_Z": 1.0, "mom": 2.0}, "name a column twice"),
                            ({"vol_z": "high", "mom": 2.0}, "feature 'vol_z' must be a number"),
                            ({"vol_z": float("inf"), "mom": 2.0}, "infinite value in feature column 'vol_z'"),
                            ([1.0, 2.0], "must map each column name")):
        with pytest.raises(UsageError, match=re.escape(match)):
            policy.update(*bar, features=features)
    assert policy.bars == 0
    policy.update(*bar, features={"vol_z": None, "mom": 2.0})
    with pytest.raises(UsageError, match="no value \\(NaN\\) for feature 'Mom' after its first value"):
        policy.update("2024-01-03", 10, 10, 10, 10, features={"vol_z": 1.0, "mom": float("nan")})
    assert policy.bars == 1
    plain = TradingPolicy.load(run / "checkpoints")
    with pytest.raises(UsageError, match="reads no feature columns"):
        plain.update(*bar, features={"vol_z": 1.0})
    # data without the columns: a MarketData loaded without them, a DataFrame lacking one
    with pytest.raises(UsageError, match="has no feature column 'vol_z', 'Mom', which the policy reads"):
        policy.warm_up(load_ohlcv(featured / "prices.csv"))
    with pytest.raises(UsageError, match="has no feature column 'Mom'.*trained with --features vol_z,Mom"):
        policy.warm_up(pd.read_csv(featured / "prices.csv").drop(columns="mom"))
    # states whose feature normaliser does not match this policy's
    policy.warm_up(data_head(data, 120))
    state = policy.state_dict()
    features = state["features"]
    fresh = TradingPolicy.load(featured / "checkpoints")
    for broken, match in (({**features, "window": 128}, "feature normaliser has other constants: window 128"),
                          ({**features, "clip": 3.0}, "other constants: clip 3.0"),
                          ({**features, "rows": features["rows"][1:]}, "holds 119 rows; 120 expected"),
                          ({**features, "rows": [[1.0, 2.0]] + features["rows"][1:]}, "a NaN after a column's"),
                          ({**features, "names": ["vol_z"]}, "feature normaliser's columns ['vol_z']"),
                          (None, "no 'features' entry")):
        with pytest.raises(UsageError, match=re.escape(match)):
            fresh.load_state_dict({**state, "features": broken})
        assert fresh.bars == 0
    with pytest.raises(UsageError, match="another policy"):
        fresh.load_state_dict(plain.state_dict())
    with pytest.raises(UsageError, match="feature columns \\['vol_z'\\] are not this policy's"):
        fresh.load_state_dict({**state, "policy": {**state["policy"], "features": ["vol_z"]}})
    # the bar chain covers the feature values: a revised value of an earlier bar is another history
    fresh.load_state_dict(state)
    fresh.verify_history(data)
    revised = data.features.copy()
    revised[60, 1] += 1e-6
    with pytest.raises(UsageError, match="are not the 120 bars the state has consumed"):
        fresh.verify_history(dataclasses.replace(data, features=revised))
