"""The PPO update's gradient handling: one flat buffer, bit for bit the per-parameter path."""
import copy

import pytest
import torch
from torch import nn

from ppo_lstm.algo import ppo
from ppo_lstm.train.build import build_agent, build_optimizer
from ppo_lstm.config.plan import learning_rates
from ppo_lstm.config.plan import minibatches
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm
from ppo_lstm.algo.ppo import FlatGradients, PPOSettings, ppo_update
from ppo_lstm.algo.rollout import RolloutCollector


class PerParameterGradients:
    """The reference: ``zero_grad(set_to_none=True)`` and ``nn.utils.clip_grad_norm_``."""

    def __init__(self, parameters, extra=0):
        self.parameters = parameters
        self.extra = torch.zeros(extra)
        self.flat = self.extra  # one process: the sum across ranks leaves it as it is

    def zero_(self):
        for p in self.parameters:
            p.grad = None
        self.extra.zero_()

    def clip_norm_(self, max_norm):
        return nn.utils.clip_grad_norm_(self.parameters, max_norm)


def test_flat_gradients_are_the_parameters_grads_and_clip_like_clip_grad_norm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    twin = copy.deepcopy(model)
    x = torch.randn(11, 5)
    gradients = FlatGradients(list(model.parameters()))
    model(x).square().sum().backward()
    twin(x).square().sum().backward()
    assert torch.equal(gradients.flat, torch.cat([p.grad.flatten() for p in twin.parameters()]))
    for p in model.parameters():
        assert p.grad._base is gradients.flat  # still views into the buffer

    total = gradients.clip_norm_(0.1)
    expected = nn.utils.clip_grad_norm_(list(twin.parameters()), 0.1)
    assert torch.equal(total, expected) and float(total) > 0.1  # it did clip
    for ours, theirs in zip(model.parameters(), twin.parameters()):
        assert torch.equal(ours.grad, theirs.grad)

    gradients.zero_()
    assert not gradients.flat.any() and all(not p.grad.any() for p in model.parameters())
    model(x).sum().backward()  # accumulates into the zeroed views, not into new tensors
    assert gradients.flat.any() and all(p.grad._base is gradients.flat for p in model.parameters())


@pytest.mark.parametrize("max_grad_norm", [0.5, 0.01])
def test_ppo_update_is_bitwise_the_per_parameter_update(monkeypatch, max_grad_norm):
    """Two updates on a real rollout, with the flat buffer and with the per-parameter
    reference: weights, Adam state and statistics equal bit for bit (0.01 clips every step)."""
    config = TrainConfig(max_grad_norm=max_grad_norm)
    torch.manual_seed(0)
    agent = build_agent(config)
    collector = RolloutCollector(config, agent, 0, 16, torch.device("cpu"), None)
    collector.collect(0)
    batch = collector.finish()
    settings = PPOSettings(config.clip, config.epochs, minibatches(config), config.ent_coef, config.vf_coef,
                           config.max_grad_norm, config.clip_vloss, config.norm_adv, config.target_kl)

    def two_updates(agent):
        optimizer = build_optimizer(agent, learning_rates(config))
        generator = torch.Generator().manual_seed(3)
        stats = [ppo_update(agent, optimizer, batch, settings, generator, LocalComm()).fetch() for _ in range(2)]
        return agent.state_dict(), optimizer.state_dict(), stats

    flat = two_updates(copy.deepcopy(agent))
    monkeypatch.setattr(ppo, "FlatGradients", PerParameterGradients)
    reference = two_updates(copy.deepcopy(agent))

    assert flat[2] == reference[2]
    for name, value in reference[0].items():
        assert torch.equal(flat[0][name], value), name
    for index, state in reference[1]["state"].items():
        for key, value in state.items():
            assert torch.equal(flat[1]["state"][index][key], value), (index, key)
    assert not torch.equal(flat[0]["policy_head.weight"], agent.state_dict()["policy_head.weight"])  # it trained


def test_bf16_autocast_update_keeps_float32_weights_and_stays_near_the_rollout_policy():
    """With autocast the forward pass runs in bfloat16: the first minibatch's log-probs then
    differ from the float32 rollout's by bfloat16 rounding (approx-KL above float32's, yet
    far inside the clip range), and the weights, gradients and Adam state stay float32."""
    config = TrainConfig()
    torch.manual_seed(0)
    agent = build_agent(config)
    with torch.no_grad():
        agent.policy_head.weight.mul_(100.0)  # logits of order 1, not the near-uniform initial policy's
    collector = RolloutCollector(config, agent, 0, 16, torch.device("cpu"), None)
    collector.collect(0)
    batch = collector.finish()

    def first_step_kl(autocast):
        twin = copy.deepcopy(agent)
        settings = PPOSettings(config.clip, 1, 1, config.ent_coef, config.vf_coef, config.max_grad_norm,
                               config.clip_vloss, config.norm_adv, None, autocast)  # one step on the whole batch
        optimizer = build_optimizer(twin, learning_rates(config))
        stats = ppo_update(twin, optimizer, batch, settings, torch.Generator().manual_seed(0), LocalComm()).fetch()
        return stats, twin, optimizer

    fp32, _, _ = first_step_kl(False)
    bf16, twin, optimizer = first_step_kl(True)
    assert abs(fp32.approx_kl) < 1e-9  # float32 replays the rollout up to float rounding
    assert 1e-9 < bf16.approx_kl < 1e-3 and bf16.clip_fraction == 0.0
    assert bf16.finite and all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in twin.parameters())
    assert all(v.dtype == torch.float32 for s in optimizer.state.values() for k, v in s.items() if k != "step")
    assert not torch.equal(twin.policy_head.weight, agent.policy_head.weight)
