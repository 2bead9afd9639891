"""The rollout's action sampler: torch.multinomial's draws, bit for bit, on the host path and on
the device path (run here on the CPU; bench/gpu_sampler.py checks the device path on CUDA)."""
import numpy as np
import pytest
import torch

from ppo_lstm.algo.rollout import sample_actions
from ppo_lstm.errors import TrainingError


@pytest.mark.parametrize("envs,actions", [(8, 3), (1, 3), (33, 7)])
def test_cpu_draws_are_torch_multinomials_with_the_same_generator_use(envs, actions):
    logit_source = torch.Generator().manual_seed(1)
    ours, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for i in range(500):
        logits = torch.randn(envs, actions, generator=logit_source) * (1 + i % 7)
        if i % 5 == 0:
            logits[0, 0] = float("-inf")  # a zero probability: valid, never drawn
        drawn, host = sample_actions(logits, ours, False, 0)
        expected = torch.multinomial(logits.softmax(-1), 1, generator=theirs)[:, 0]
        assert torch.equal(drawn, expected), i
        assert np.array_equal(host, expected.numpy()) and drawn.shape == (envs,)
        if i % 5 == 0:
            assert drawn[0] != 0
    assert torch.equal(ours.get_state(), theirs.get_state())  # the stream goes on the same way


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_probability_raises_the_training_error(bad):
    logits = torch.zeros(4, 3)
    logits[2, 1] = bad
    with pytest.raises(TrainingError, match="non-finite outputs after update 7 .*--learning-rate-actor"):
        sample_actions(logits, torch.Generator().manual_seed(0), False, 7)


@pytest.mark.parametrize("envs,actions", [(8, 3), (1, 3), (33, 7)])
def test_device_path_draws_are_torch_multinomials_with_the_same_generator_use(envs, actions):
    logit_source = torch.Generator().manual_seed(2)
    ours, theirs = torch.Generator().manual_seed(6), torch.Generator().manual_seed(6)
    for i in range(500):
        logits = torch.randn(envs, actions, generator=logit_source) * (1 + i % 7)
        drawn, host = sample_actions(logits, ours, True, 0)
        expected = torch.multinomial(logits.softmax(-1), 1, generator=theirs)[:, 0]
        assert torch.equal(drawn, expected), i
        assert np.array_equal(host, expected.numpy()) and host.shape == (envs,)
    assert torch.equal(ours.get_state(), theirs.get_state())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_device_path_raises_on_any_non_finite_logit(bad):
    logits = torch.zeros(4, 3)
    logits[1, 2] = bad
    with pytest.raises(TrainingError, match="non-finite outputs after update 3; .*--learning-rate-actor"):
        sample_actions(logits, torch.Generator().manual_seed(0), True, 3)
