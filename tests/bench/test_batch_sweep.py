"""bench/batch_sweep.py's --config: numbers and text (an observation option such as env.ema_spans=none)
reach bench/learning.py's --set as written, and the row's label names them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.batch_sweep import DEFAULT_LR, label, parse_config  # noqa: E402


def test_a_config_keeps_numbers_and_text_and_the_label_names_both():
    config = parse_config("num_envs=64,lr_scale=2.83,gamma=0.95,env.ema_spans=none")
    assert config["num_envs"] == 64.0 and config["gamma"] == 0.95 and config["env.ema_spans"] == "none"
    assert config["learning_rate_actor"] == pytest.approx(DEFAULT_LR["learning_rate_actor"] * 2.83)
    assert label(config) == "batch 1024, 4 minibatches of 256, rates x2.83, gamma=0.95, env.ema_spans=none"
    assert parse_config("default") == {"num_envs": 8, "minibatches": 4, **DEFAULT_LR}  # as before the rule picked them
    assert parse_config("num_envs=8")["minibatches"] == 4 and parse_config("minibatches=2")["minibatches"] == 2
