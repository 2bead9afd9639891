"""The recurrent actor-critic: init, done-masking and sequence replay."""
import pytest
import torch

from envs.config import EnvConfig
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.config.plan import minibatches
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker
from ppo_lstm.train.shutdown import StopRequest
from ppo_lstm.train.trainer import Trainer


def test_orthogonal_init_gains_and_zero_biases():
    torch.manual_seed(0)
    agent = RecurrentActorCritic(obs_dim=11, num_actions=3, hidden_size=16, lstm_size=8)
    first = agent.encoder[0].weight  # [16, 11]: orthonormal columns scaled by sqrt(2)
    assert torch.allclose(first.T @ first, 2.0 * torch.eye(11), atol=1e-5)
    policy = agent.policy_head.weight  # [3, 8], gain 0.01
    assert torch.allclose(policy @ policy.T, 1e-4 * torch.eye(3), atol=1e-9)
    value = agent.value_head.weight  # [1, 8], gain 1
    assert value.norm().item() == pytest.approx(1.0, abs=1e-5)
    for name, p in agent.named_parameters():
        if "bias" in name:
            assert p.abs().max().item() == 0.0, name


def test_reset_inside_a_sequence_masks_the_state():
    torch.manual_seed(0)
    agent = RecurrentActorCritic(obs_dim=6, num_actions=3, hidden_size=8, lstm_size=8)
    T, B = 10, 2
    obs = torch.randn(T, B, 6)
    state = (torch.randn(1, B, 8), torch.randn(1, B, 8))  # a non-zero carried state
    starts = torch.zeros(T, B)
    starts[4, 0] = 1.0  # env 0 begins a new episode at t=4
    with torch.no_grad():
        logits, values, _ = agent(obs, state, starts)
        # env 0 from t=4 must equal a fresh replay of obs[4:] from the zero state ...
        fresh_logits, fresh_values, _ = agent(obs[4:, :1], agent.initial_state(1), torch.zeros(T - 4, 1))
        # ... and env 1 must be unaffected by env 0's reset.
        alone_logits, _, _ = agent(obs[:, 1:], (state[0][:, 1:], state[1][:, 1:]), torch.zeros(T, 1))
    assert torch.allclose(logits[4:, :1], fresh_logits, atol=1e-6)
    assert torch.allclose(values[4:, :1], fresh_values, atol=1e-6)
    assert torch.allclose(logits[:, 1:], alone_logits, atol=1e-6)
    # Before the reset, env 0 did use its carried state (differs from a zero start).
    with torch.no_grad():
        zero_logits, _, _ = agent(obs[:4, :1], agent.initial_state(1), torch.zeros(4, 1))
    assert not torch.allclose(logits[:4, :1], zero_logits, atol=1e-6)


def test_segmented_replay_equals_a_step_by_step_loop():
    torch.manual_seed(1)
    agent = RecurrentActorCritic(obs_dim=5, num_actions=3, hidden_size=8, lstm_size=8)
    T, B = 12, 3
    obs = torch.randn(T, B, 5)
    starts = torch.zeros(T, B)
    starts[0] = 1
    starts[5, 1] = 1
    starts[9, :] = 1
    state = agent.initial_state(B)
    with torch.no_grad():
        full_logits, full_values, full_state = agent(obs, state, starts)
        step_logits = []
        s = state
        for t in range(T):
            lg, _, s = agent(obs[t:t + 1], s, starts[t:t + 1])
            step_logits.append(lg)
    assert torch.allclose(full_logits, torch.cat(step_logits), atol=1e-6)
    assert torch.allclose(full_state[0], s[0], atol=1e-6)


def test_forward_is_bitwise_the_modules_own_calls():
    """forward calls the layers as functions and the LSTM op directly: the same values and
    gradients, bit for bit, as calling the encoder, nn.LSTM and the heads as modules."""
    torch.manual_seed(3)
    agent = RecurrentActorCritic(obs_dim=5, num_actions=3, hidden_size=16, lstm_size=16)
    obs, starts = torch.randn(12, 4, 5), torch.zeros(12, 4)
    starts[0], starts[5, 1], starts[9, :] = 1, 1, 1
    h0, c0 = torch.randn(1, 4, 16), torch.randn(1, 4, 16)

    def by_modules():
        features = agent.encoder(obs.reshape(48, 5)).reshape(12, 4, 16)
        keep, (h, c), outs = 1.0 - starts, (h0, c0), []
        for a, b in ((0, 5), (5, 9), (9, 12)):
            out, (h, c) = agent.lstm(features[a:b], (h * keep[a].view(1, 4, 1), c * keep[a].view(1, 4, 1)))
            outs.append(out)
        hidden = torch.cat(outs)
        return agent.policy_head(hidden), agent.value_head(hidden).squeeze(-1), h, c

    results = []
    for run in (lambda: agent(obs, (h0, c0), starts), by_modules):
        agent.zero_grad()
        out = run()
        logits, values, h, c = out if len(out) == 4 else (out[0], out[1], *out[2])
        (logits.square().sum() + values.sum() + h.sum() + c.sum()).backward()
        results.append([logits, values, h, c] + [p.grad.clone() for p in agent.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_step_equals_forward_one_step_at_a_time_with_resets():
    """The rollout's one-step path (lstm_cell) gives forward's logits, values and state."""
    torch.manual_seed(2)
    agent = RecurrentActorCritic(obs_dim=5, num_actions=3, hidden_size=8, lstm_size=8)
    T, B = 12, 3
    obs, starts = torch.randn(T, B, 5), torch.zeros(T, B)
    starts[0], starts[5, 1], starts[9, :] = 1, 1, 1
    with torch.no_grad():
        logits, values, final = agent(obs, agent.initial_state(B), starts)
        state, stepped = (torch.randn(1, B, 8), torch.randn(1, B, 8)), []  # reset at t=0 must drop it
        for t in range(T):
            lg, v, state = agent.step(obs[t], state, starts[t])
            stepped.append((lg, v))
    assert torch.allclose(torch.stack([lg for lg, _ in stepped]), logits, atol=1e-6)
    assert torch.allclose(torch.stack([v for _, v in stepped]), values, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(state, final))
    assert state[0].shape == (1, B, 8)


def test_step_told_no_env_starts_is_bitwise_the_masked_step():
    """``any_start`` (the rollout knows it on the host) skips the reset: bit for bit the same
    outputs where no env starts, and the reset still happens where one does (``any_start=True``)."""
    torch.manual_seed(3)
    agent = RecurrentActorCritic(obs_dim=5, num_actions=3, hidden_size=8, lstm_size=8)
    obs, state = torch.randn(4, 5), (torch.randn(1, 4, 8), torch.randn(1, 4, 8))
    with torch.no_grad():
        masked = agent.step(obs, state, torch.zeros(4))
        told = agent.step(obs, state, torch.zeros(4), any_start=False)
        assert all(torch.equal(a, b) for a, b in zip((*masked[:2], *masked[2]), (*told[:2], *told[2])))
        starts = torch.tensor([0.0, 1.0, 0.0, 0.0])
        reset = agent.step(obs, state, starts, any_start=True)
        fresh = agent.step(obs[1:2], (torch.zeros(1, 1, 8), torch.zeros(1, 1, 8)), torch.zeros(1))
    assert torch.allclose(reset[0][1], fresh[0][0], atol=1e-6)  # env 1 started from a zero state
    assert not torch.allclose(reset[0][0], fresh[0][0], atol=1e-6)


def test_step_with_held_weights_is_bitwise_the_plain_step_and_sees_in_place_updates():
    """A rollout fetches :meth:`step_weights` once: the same outputs bit for bit, and the
    optimizer's in-place steps show through them (they are the parameters, not copies)."""
    torch.manual_seed(4)
    agent = RecurrentActorCritic(obs_dim=5, num_actions=3, hidden_size=8, lstm_size=8)
    held = agent.step_weights()
    assert len(held) == len(list(agent.parameters()))
    assert {id(t) for t in held} == {id(p) for p in agent.parameters()}
    obs, state, starts = torch.randn(4, 5), (torch.randn(1, 4, 8), torch.randn(1, 4, 8)), torch.tensor([0., 1, 0, 0])
    optimizer = torch.optim.Adam(agent.parameters(), lr=0.1)
    for _ in range(2):
        with torch.no_grad():
            plain = agent.step(obs, state, starts)
            with_held = agent.step(obs, state, starts, weights=held)
        assert all(torch.equal(a, b) for a, b in zip((*plain[:2], *plain[2]), (*with_held[:2], *with_held[2])))
        agent(obs[None], state, starts[None])[0].sum().backward()
        optimizer.step()
    with torch.no_grad():
        assert not torch.equal(agent.step(obs, state, starts)[0], plain[0])  # the update changed the outputs


def test_step_cell_is_bitwise_step_without_the_layer_dimension():
    """The rollout's loop steps ``[N, H]`` states through :meth:`step_cell`: bit for bit
    :meth:`step`'s outputs and state, over steps with and without episode starts."""
    torch.manual_seed(5)
    agent = RecurrentActorCritic(obs_dim=5, num_actions=3, hidden_size=8, lstm_size=8)
    obs, starts = torch.randn(6, 4, 5), torch.zeros(6, 4)
    starts[0], starts[3, 2] = 1, 1
    state = (torch.randn(1, 4, 8), torch.randn(1, 4, 8))
    h, c = state[0][0], state[1][0]
    with torch.no_grad():
        for t in range(6):
            any_start = bool(starts[t].any())
            logits, values, state = agent.step(obs[t], state, starts[t], any_start)
            cell_logits, cell_values, h, c = agent.step_cell(obs[t], h, c, starts[t], any_start)
            assert h.shape == c.shape == (4, 8)
            assert torch.equal(logits, cell_logits) and torch.equal(values, cell_values)
            assert torch.equal(state[0][0], h) and torch.equal(state[1][0], c)


def test_replay_from_stored_state_reproduces_rollout_log_probs(tmp_path):
    """The first minibatch of an update sees ratio 1: replaying each env sequence from
    the stored initial (h, c) with done-masking gives the rollout's log-probs."""
    config = TrainConfig(episodes=50, num_envs=4, update_interval=64, log_file=str(tmp_path / "t.log"),
                         checkpoint_dir=str(tmp_path / "ck"), progress=False, hidden_size=16, lstm_size=16,
                         env=EnvConfig(market="regime", window=8, episode_length=6))
    trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
    try:
        for _ in range(2):  # the second rollout starts from a carried, non-zero LSTM state
            trainer.rollout.collect(trainer.state.update)
            batch = trainer.rollout.finish()
        assert batch.initial_h.abs().sum() > 0
        assert batch.episode_starts[1:].sum() > 0  # episodes of 6 steps end inside the 16-step rollout
        mb = batch.select_envs(torch.tensor([3, 1]))
        with torch.no_grad():
            logits, values, _ = trainer.agent(mb.obs, (mb.initial_h, mb.initial_c), mb.episode_starts)
        new_log_probs = torch.distributions.Categorical(logits=logits).log_prob(mb.actions.long())
        ratio = (new_log_probs - mb.log_probs).exp()
        # Equal up to float32 rounding of batched vs per-step matmuls (not bitwise).
        assert (ratio - 1).abs().max().item() < 1e-5
        assert torch.allclose(values, mb.values, atol=1e-5)
    finally:
        trainer.log.close()


def test_learning_rate_groups_are_separate(tmp_path):
    config = TrainConfig(learning_rate_actor=1e-4, learning_rate_critic=2e-3, log_file=str(tmp_path / "t.log"),
                         checkpoint_dir=str(tmp_path / "ck"), progress=False)
    trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
    trainer.log.close()
    actor, critic = trainer.optimizer.param_groups
    assert actor["lr"] == 1e-4 and critic["lr"] == 2e-3
    assert {id(p) for p in critic["params"]} == {id(p) for p in trainer.agent.value_head.parameters()}
    assert len(actor["params"]) + len(critic["params"]) == len(list(trainer.agent.parameters()))


@pytest.mark.parametrize("anneal", [True, False])
def test_learning_rates_anneal_linearly_to_zero_over_the_run(tmp_path, anneal):
    """--anneal-lr (the default): update u of U runs at lr * (1 - u / U), in both groups."""
    env = EnvConfig(market="regime", episode_length=16, window=8)
    config = TrainConfig(episodes=32, num_envs=8, anneal_lr=anneal, learning_rate_actor=1e-3,
                         learning_rate_critic=4e-3, holdout_episodes=0, log_file=str(tmp_path / "t.log"),
                         checkpoint_dir=str(tmp_path / "ck"), progress=False, env=env)
    trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
    seen: list[tuple[float, float]] = []
    step = trainer.optimizer.step

    def record_then_step(*args, **kwargs):
        seen.append(tuple(group["lr"] for group in trainer.optimizer.param_groups))
        return step(*args, **kwargs)

    trainer.optimizer.step = record_then_step
    trainer.run()
    updates = trainer.state.update
    assert updates == 32 * 16 // 128 == trainer.plan.updates_for(32, 16)
    per_update = seen[:: len(seen) // updates]  # the first gradient step of each update
    assert len(seen) == updates * config.epochs * minibatches(config)
    for u, (actor, critic) in enumerate(per_update):
        frac = 1.0 - u / updates if anneal else 1.0
        assert actor == pytest.approx(1e-3 * frac) and critic == pytest.approx(4e-3 * frac)
