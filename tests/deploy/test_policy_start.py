"""``TradingPolicy``'s start rule without a trained run: the first decision at the first bar at or
after ``start`` (its window: the bars before it), the backtest's first decision bar; and a state
saved by an older version, which waited ``window`` bars after ``start``, is refused rather than
opening the account a bar late. In-process, fast (a random agent)."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from ppo_lstm.deploy.policy import TradingPolicy
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.backtest import backtest_history

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evaluation"))
from test_backtest import CFG, sharp_agent, walk  # noqa: E402

W = CFG.window


def test_the_stream_opens_at_starts_bar_like_the_backtest() -> None:
    data, lo = walk(80, seed=3), 20
    agent = sharp_agent(CFG)
    policy = TradingPolicy.from_agent(agent, CFG)
    start = str(pd.Timestamp(data.timestamps[lo]).date())
    decision = policy.warm_up(data, start=start)
    result = backtest_history(agent, CFG, data, lo)
    assert policy.opened_at == pd.Timestamp(data.timestamps[lo]) == pd.Timestamp(result.start)
    assert decision is not None and decision.equity == result.equity[-1]
    assert policy.bars_from_start == len(data) - lo


def test_a_state_of_the_older_rule_is_refused() -> None:
    data = walk(W + 6, seed=4)
    policy = TradingPolicy.from_agent(sharp_agent(CFG), CFG)
    assert policy.warm_up(data, start="2030-01-01") is None  # no bar at or after start: not opened
    state = policy.state_dict()
    assert state["opened"] is False and state["since_start"] == 0
    state["since_start"] = 3  # an older version's stream 3 bars after start, waiting for W of them
    with pytest.raises(UsageError, match="a state of an older version"):
        TradingPolicy.from_agent(sharp_agent(CFG), CFG).load_state_dict(state)
    fresh = TradingPolicy.from_agent(sharp_agent(CFG), CFG)
    fresh.load_state_dict(policy.state_dict())  # this version's state of the same stream restores
    assert fresh.bars == W + 6 and fresh.decision is None
