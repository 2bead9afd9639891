"""The rollout's action sampler: torch.multinomial's draws, bit for bit, on the host path and on
the device path (run here on the CPU; bench/gpu_sampler.py checks the device path on CUDA)."""
import numpy as np
import pytest
import torch

from ppo_lstm.algo.rollout import RolloutCollector, sample_actions
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.errors import TrainingError
from ppo_lstm.train.build import build_agent


@pytest.mark.parametrize("check_on_device", [False, True], ids=["host path", "device path"])
@pytest.mark.parametrize("envs,actions", [(8, 3), (1, 3), (33, 7)])
def test_draws_are_torch_multinomials_with_the_same_generator_use(envs, actions, check_on_device):
    logit_source = torch.Generator().manual_seed(1)
    ours, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    zero_probability = not check_on_device  # the device path refuses any non-finite logit, -inf too
    for i in range(500):
        logits = torch.randn(envs, actions, generator=logit_source) * (1 + i % 7)
        if zero_probability and i % 5 == 0:
            logits[0, 0] = float("-inf")  # a zero probability: valid, never drawn
        drawn, host = sample_actions(logits, ours, check_on_device, 0)
        expected = torch.multinomial(logits.softmax(-1), 1, generator=theirs)[:, 0]
        assert torch.equal(drawn, expected), i
        assert np.array_equal(host, expected.numpy()) and drawn.shape == host.shape == (envs,)
        if zero_probability and i % 5 == 0:
            assert drawn[0] != 0
    assert torch.equal(ours.get_state(), theirs.get_state())  # the stream goes on the same way


@pytest.mark.parametrize("bad", ["nan", "inf", "all -inf"])
def test_host_path_gives_a_valid_action_whose_log_prob_is_not_finite_on_a_non_finite_row(bad):
    """What the rollout's once-per-rollout check relies on: a row whose probabilities are not
    finite still yields an action index, and that action's log-prob is never finite."""
    logits = torch.zeros(4, 3)
    if bad == "all -inf":
        logits[2] = float("-inf")
    else:
        logits[2, 1] = float(bad)
    actions, host = sample_actions(logits, torch.Generator().manual_seed(0), False, 7)
    assert ((0 <= host) & (host < 3)).all() and np.array_equal(host, actions.numpy())
    log_probs = logits.log_softmax(-1).gather(-1, actions[:, None])[:, 0]
    assert torch.isfinite(log_probs).tolist() == [True, True, False, True]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_rollout_of_a_non_finite_policy_raises_the_training_error(bad):
    config = TrainConfig(num_envs=3)
    torch.manual_seed(0)
    agent = build_agent(config)
    collector = RolloutCollector(config, agent, 0, 8, torch.device("cpu"), None)
    collector.collect(6)  # a finite policy: no error
    with torch.no_grad():
        agent.policy_head.bias[1] = bad
    with pytest.raises(TrainingError, match="non-finite outputs after update 7 .*--learning-rate-actor"):
        collector.collect(7)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_device_path_raises_on_any_non_finite_logit(bad):
    logits = torch.zeros(4, 3)
    logits[1, 2] = bad
    with pytest.raises(TrainingError, match="non-finite outputs after update 3; .*--learning-rate-actor"):
        sample_actions(logits, torch.Generator().manual_seed(0), True, 3)
