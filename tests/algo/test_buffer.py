"""Rollout buffer shapes and GAE against a hand-computed example."""
import pytest
import torch

from ppo_lstm.algo.buffer import RolloutBuffer, compute_gae


def test_gae_matches_hand_computation():
    # One env, three steps; the episode ends after step 1 (step 2 starts a new one).
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    starts = torch.tensor([[0.0], [0.0], [1.0]])
    gamma, lam = 0.9, 0.8
    adv = compute_gae(rewards, values, starts, torch.tensor([2.0]), torch.tensor([0.0]), gamma, lam)
    # t=2: delta = 3 + 0.9*2.0 - 1.5 = 3.3                       -> A2 = 3.3
    # t=1: next obs starts an episode: delta = 2 - 1.0 = 1.0     -> A1 = 1.0 (no carry)
    # t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4; A0 = 1.4 + 0.9*0.8*1.0 = 2.12
    assert adv.flatten().tolist() == pytest.approx([2.12, 1.0, 3.3])


def test_gae_does_not_bootstrap_into_a_new_episode():
    rewards = torch.zeros(2, 1)
    values = torch.zeros(2, 1)
    adv = compute_gae(rewards, values, torch.zeros(2, 1), torch.tensor([5.0]), torch.tensor([1.0]), 0.99, 0.95)
    assert adv.abs().max().item() == 0.0
    adv = compute_gae(rewards, values, torch.zeros(2, 1), torch.tensor([5.0]), torch.tensor([0.0]), 0.5, 1.0)
    assert adv.flatten().tolist() == pytest.approx([1.25, 2.5])


def test_buffer_shapes_and_finish():
    T, N, D, H = 4, 3, 5, 7
    buf = RolloutBuffer(T, N, D, H, torch.device("cpu"))
    for t in range(T):
        buf.add(t, torch.full((N, D), float(t)), torch.zeros(N), torch.ones(N), torch.zeros(N), torch.zeros(N))
        buf.rewards[t] = torch.ones(N)
    batch = buf.finish(torch.zeros(N), torch.zeros(N), 0.99, 0.95)
    assert batch.obs.shape == (T, N, D)
    for name in ("actions", "log_probs", "values", "rewards", "episode_starts", "advantages", "returns"):
        assert getattr(batch, name).shape == (T, N), name
    assert batch.initial_h.shape == batch.initial_c.shape == (1, N, H)
    sub = batch.select_envs(torch.tensor([2, 0]))
    assert sub.obs.shape == (T, 2, D) and sub.initial_h.shape == (1, 2, H)
    assert torch.equal(sub.returns, batch.returns[:, [2, 0]])
    # finish() hands out copies: refilling the buffer does not change the batch
    buf.obs.zero_()
    assert batch.obs[3, 0, 0].item() == 3.0


def test_gathered_packs_every_field_into_one_collective_and_back():
    """``packed`` makes one [N, F] tensor; the ranks' rows side by side, unpacked, put rank r's
    envs at N*r..N*r+N-1 (what ``agreement.exchange`` sends through its one collective)."""
    from ppo_lstm.algo.buffer import RolloutBatch

    g = torch.Generator().manual_seed(0)
    T, N, D, H = 5, 3, 4, 2
    batch = RolloutBatch(obs=torch.randn(T, N, D, generator=g),
                         **{k: torch.randn(T, N, generator=g) for k in ("actions", "log_probs", "values", "rewards",
                                                                       "episode_starts", "advantages", "returns")},
                         initial_h=torch.randn(1, N, H, generator=g), initial_c=torch.randn(1, N, H, generator=g))
    calls = []

    def two_ranks(rows):
        calls.append(rows.shape)
        return torch.cat([rows, rows + 100.0])  # "rank 1" holds the same envs shifted by 100

    both = batch.unpacked(two_ranks(batch.packed()))
    assert calls == [(N, T * (D + 7) + 2 * H)]
    for name in ("obs", "actions", "log_probs", "values", "rewards", "episode_starts", "advantages", "returns",
                 "initial_h", "initial_c"):
        ours, got = getattr(batch, name), getattr(both, name)
        assert got.shape == (ours.shape[0], 2 * N, *ours.shape[2:]) and got.is_contiguous(), name
        assert torch.equal(got[:, :N], ours) and torch.equal(got[:, N:], ours + 100.0), name
    assert torch.equal(batch.unpacked(batch.packed()).obs, batch.obs)  # one worker: unchanged


def _gae_torch_loop(rewards, values, starts, next_value, next_start, gamma, lam):
    """The recursion as torch operations, step by step (what compute_gae did before its NumPy path)."""
    not_done = 1.0 - torch.cat([starts[1:], next_start[None]])
    deltas = rewards + gamma * torch.cat([values[1:], next_value[None]]) * not_done - values
    decay = gamma * lam * not_done
    out, last = torch.empty_like(rewards), torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + decay[t] * last
        out[t] = last
    return out


@pytest.mark.parametrize("steps,envs", [(16, 8), (128, 8), (1, 3), (7, 2)])
def test_gae_on_the_cpu_is_bitwise_the_torch_recursion(steps, envs):
    gen = torch.Generator().manual_seed(steps * envs)
    for trial in range(50):
        scale = 10.0 ** (trial % 9 - 6)  # rewards from 1e-6 to 1e2
        rewards = torch.randn(steps, envs, generator=gen) * scale
        values = torch.randn(steps, envs, generator=gen)
        starts = (torch.rand(steps, envs, generator=gen) < 0.1).float()
        next_value, next_start = torch.randn(envs, generator=gen), (torch.rand(envs, generator=gen) < 0.1).float()
        for gamma, lam in ((0.99, 0.95), (0.9, 0.8), (1.0, 1.0)):
            assert torch.equal(compute_gae(rewards, values, starts, next_value, next_start, gamma, lam),
                               _gae_torch_loop(rewards, values, starts, next_value, next_start, gamma, lam))
