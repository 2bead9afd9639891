"""--norm-value: the running statistics against NumPy, their use in the rollout and the update, a
resume that continues them bit for bit, and a run without the setting as it always was."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TINY, assert_models_equal, cli_in_process, copy_checkpoint, episode_lines, load_state
from envs.config import EnvConfig
from ppo_lstm.algo.ppo import PPOSettings, ppo_update
from ppo_lstm.algo.rollout import RolloutCollector
from ppo_lstm.algo.value_norm import EPSILON, PRIOR_COUNT, RunningMeanStd
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm
from ppo_lstm.evaluation.loading import load_policy
from ppo_lstm.rundir.checkpoint import CheckpointDir, load_checkpoint
from ppo_lstm.train.build import build_agent, build_optimizer
from ppo_lstm.config.plan import learning_rates

pytestmark = pytest.mark.timeout(180)

EXACT = ["--episodes", "16", "--checkpoint-interval", "4", "--log-interval", "2"]


def test_the_running_statistics_are_numpys_of_the_whole_stream_with_the_prior():
    rng = np.random.default_rng(0)
    stream = [rng.normal(3.0, 2.0, size=(16, 4)).astype(np.float32) for _ in range(5)]
    stats = RunningMeanStd()
    for batch in stream:
        stats.update(torch.from_numpy(batch))
    seen = np.concatenate([b.reshape(-1) for b in stream]).astype(np.float64)
    count = PRIOR_COUNT + seen.size
    mean = seen.sum() / count  # the prior: weight 1e-4 at mean 0, variance 1
    var = (PRIOR_COUNT * (1.0 + mean ** 2) + ((seen - mean) ** 2).sum()) / count
    assert stats.count == pytest.approx(count, rel=1e-15)
    assert stats.mean == pytest.approx(mean, rel=1e-12)
    assert stats.var == pytest.approx(var, rel=1e-12)
    assert stats.std == pytest.approx(math.sqrt(var + EPSILON), rel=1e-12)


def test_normalize_and_denormalize_are_inverse_and_a_non_finite_batch_is_left_out():
    stats = RunningMeanStd()
    stats.update(torch.tensor([1.0, 2.0, 4.0, 9.0]))
    before = stats.state()
    values = torch.linspace(-3, 3, 7)
    torch.testing.assert_close(stats.denormalize(stats.normalize(values)), values)
    assert stats.normalize(torch.tensor([stats.mean])).abs().item() < 1e-6
    stats.update(torch.tensor([1.0, float("nan")]))
    stats.update(torch.zeros(0))
    assert stats.state() == before
    copy = RunningMeanStd()
    copy.load(before)
    assert copy == stats


def _collector(norm_value: bool, weights: dict | None = None) -> tuple[TrainConfig, RolloutCollector]:
    config = TrainConfig(num_envs=4, hidden_size=16, lstm_size=16, norm_value=norm_value,
                         env=EnvConfig(episode_length=12, window=8))
    torch.manual_seed(0)
    agent = build_agent(config)
    if weights is not None:
        agent.load_state_dict(weights)
    return config, RolloutCollector(config, agent, 0, 16, torch.device("cpu"), None)


def test_the_rollout_keeps_values_in_reward_units_and_the_update_trains_on_normalised_ones():
    _, plain = _collector(False)
    config, normed = _collector(True, plain.agent.state_dict())
    normed.value_norm.update_from_moments(0.5, 4.0, 100.0)  # mean 0.5-ish, std 2-ish
    stats = normed.value_norm
    plain.collect(0), normed.collect(0)
    a, b = plain.finish(), normed.finish()
    assert torch.equal(a.actions, b.actions)  # the same policy and draws
    ends = torch.cat([a.episode_starts[1:], torch.ones_like(a.episode_starts[:1])])  # [T, N]: step t ends one
    changed = a.rewards != b.rewards  # only where a time-limit cut added gamma * V(final obs), in reward units
    assert changed.any() and bool((ends[changed] == 1).all())
    torch.testing.assert_close(b.values, a.values * stats.std + stats.mean)  # de-normalised
    settings = PPOSettings(config.clip, config.epochs, 2, config.ent_coef, config.vf_coef, config.max_grad_norm,
                           config.clip_vloss, config.norm_adv, None)
    optimizer = build_optimizer(normed.agent, learning_rates(config))
    returns = b.returns.clone()
    ppo_update(normed.agent, optimizer, b, settings, torch.Generator().manual_seed(0), LocalComm(),
               value_norm=stats)
    assert stats.count == pytest.approx(100.0 + returns.numel())
    assert torch.equal(b.returns, returns)  # the caller's batch is left as it was


def _run(cwd: Path, *flags: str) -> Path:
    cwd.mkdir()
    result = cli_in_process(cwd, *TINY, *EXACT, *flags)
    assert result.returncode == 0, result.output
    return cwd / "checkpoints"


def _at_episode(directory: Path, episodes: int) -> Path:
    return next(p for p in CheckpointDir(directory).checkpoints()
                if load_checkpoint(p)["counters"]["global_episodes"] == episodes)


def test_a_run_with_norm_value_resumes_bit_for_bit_with_its_statistics(tmp_path: Path):
    whole = _run(tmp_path / "whole", "--norm-value")
    final = CheckpointDir(whole).checkpoints()[-1]
    mid = _at_episode(whole, 8)
    saved = load_state(mid)["value_norm"]
    assert saved["count"] > PRIOR_COUNT and saved["var"] != 1.0  # it took in the batches so far
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    copy_checkpoint(whole, mid.name, resumed / "checkpoints")
    result = cli_in_process(resumed, *TINY, *EXACT, "--resume")  # --norm-value comes from the checkpoint
    assert result.returncode == 0, result.output
    assert "restarted" not in result.output
    a, b = load_state(final), load_state(resumed / "checkpoints" / final.name)
    assert_models_equal(a["model"], b["model"])
    assert a["value_norm"] == b["value_norm"] and a["config"]["norm_value"] is True
    after = [line for line in episode_lines(tmp_path / "whole" / "training.log")
             if int(line.split()[1].split("/")[0]) > 8]
    assert after and episode_lines(resumed / "training.log") == after


def test_without_norm_value_a_checkpoint_holds_no_statistics_and_the_run_differs_from_one_with_them(tmp_path):
    off, on = _run(tmp_path / "off"), _run(tmp_path / "on", "--norm-value")
    a, b = (load_state(CheckpointDir(d).checkpoints()[-1]) for d in (off, on))
    assert "value_norm" not in a and a["config"]["norm_value"] is False
    assert not torch.equal(a["model"]["value_head.weight"], b["model"]["value_head.weight"])


def test_a_loaded_norm_value_policy_reports_values_in_reward_units(tmp_path):
    checkpoint = CheckpointDir(_run(tmp_path / "run", "--norm-value")).checkpoints()[-1]
    state = load_state(checkpoint)
    agent, _ = load_policy(checkpoint)
    raw = build_agent(TrainConfig.from_dict(state["config"]))
    raw.load_state_dict(state["model"])
    stats = RunningMeanStd()
    stats.load(state["value_norm"])
    obs = torch.randn(5, 3, TrainConfig.from_dict(state["config"]).env.obs_dim)
    starts = torch.zeros(5, 3)
    with torch.no_grad():
        logits, values, _ = agent(obs, agent.initial_state(3), starts)
        raw_logits, raw_values, _ = raw(obs, raw.initial_state(3), starts)
    assert torch.equal(logits, raw_logits)  # the policy is untouched
    assert torch.allclose(values, stats.denormalize(raw_values), rtol=1e-5, atol=1e-6)
    assert stats.std != pytest.approx(1.0)  # the fold changed something
