"""Rollout collection: this worker's envs, their observations, the LSTM state carried
from one rollout to the next, the action sampler and the rollout buffer.

Shapes: T rollout steps per env, N envs on this worker, D obs size, A actions,
H LSTM size.

On a GPU a step makes one host -> device copy (:class:`~ppo_lstm.algo.staging.StepStaging`:
observations, episode starts and the previous step's rewards, from a pinned buffer)
and one device -> host copy (the actions, with the policy's finite flag). Values,
log-probs and rewards stay on the device. On the CPU the same code makes no copy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from torch import Tensor

from envs.vector import VectorTradingEnv

from .agent import LSTMState, RecurrentActorCritic
from .buffer import RolloutBatch, RolloutBuffer
from ..config.schema import TrainConfig
from ..errors import TrainingError
from .episodes import EPISODE_FIELDS, episode_records
from .seeding import derive_seed, env_seeds
from .staging import StepStaging
from .value_norm import RunningMeanStd

if TYPE_CHECKING:
    from envs.data import MarketData


NON_FINITE_ADVICE = ("lower --learning-rate-actor/--learning-rate-critic or --max-grad-norm, "
                     "or check --data")


def sample_actions(logits: Tensor, generator: torch.Generator, check_on_device: bool, update: int) -> tuple[Tensor,
                                                                                                        np.ndarray]:
    """Sample one action per env from ``logits`` ``[N, A]``: ``(actions on the device [N],
    the same on the host [N])``.

    The draw is ``torch.multinomial(probs, 1)``'s own, bit for bit and with the same use of
    ``generator``: the index of the largest ``probs / q``, ``q ~ Exp(1)`` (the exponential
    race), made in four ops (``empty_like``, ``exponential_``, ``div``, ``argmax``) where
    ``torch.multinomial`` makes about thirty, most of them checks of its input.

    On the CPU nothing is checked here: a row with a non-finite probability (from a NaN or
    +inf logit) still gives a valid action index, and its log-probability is then NaN or
    -inf, never finite. :meth:`RolloutCollector.collect` checks the rollout's stored
    log-probs once at its end and raises the :class:`TrainingError` there.

    On a GPU (``check_on_device``) the draw is the same race, so a GPU's draws too are
    ``torch.multinomial``'s, bit for bit (``bench/gpu_sampler.py`` checks it on the device),
    without its ten or so kernels of input checks. Finiteness is tested on the device instead
    of with an assert that would leave the CUDA context unusable: a non-finite policy samples
    from uniform stand-in logits (never sent to the envs), and the flag comes back in the same
    device -> host copy as the actions.
    """
    if not check_on_device:
        probs = logits.softmax(-1)  # [N, A]
        race = torch.empty_like(probs).exponential_(1.0, generator=generator)  # [N, A]
        actions = torch.div(probs, race, out=race).argmax(-1)  # [N]
        return actions, actions.numpy()
    finite = torch.isfinite(logits).all()  # [] on the device
    probs = torch.where(finite, logits, 0.0).softmax(-1)  # [N, A]
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)  # [N, A]
    actions = torch.div(probs, race, out=race).argmax(-1)  # [N]
    host = torch.cat([actions, finite.long().view(1)]).cpu().numpy()  # the step's one device -> host copy
    if not host[-1]:
        raise TrainingError(f"the policy gave non-finite outputs after update {update}; {NON_FINITE_ADVICE}")
    return actions, host[:-1]


class RolloutCollector:
    """Steps ``N`` envs ``T`` times per rollout with the shared agent; owns everything a
    rank needs to continue its rollouts bit for bit (:meth:`state`)."""

    def __init__(self, config: TrainConfig, agent: RecurrentActorCritic, rank: int, steps: int,
                 device: torch.device, data: Optional[MarketData], span: Optional[tuple[int, int]] = None) -> None:
        """``data``: history to trade (None: the simulated market); ``span``: the bars
        ``lo..hi-1`` of it that episodes lie within (default: all)."""
        self.config, self.agent, self.rank, self.steps, self.device = config, agent, rank, steps, device
        self.num_envs = config.num_envs
        self.sample_generator = torch.Generator(device).manual_seed(derive_seed(config.seed, rank, 11))
        self.env = VectorTradingEnv(config.num_envs, config.env, data=data, span=span)
        self.buffer = RolloutBuffer(steps, config.num_envs, config.env.obs_dim, config.lstm_size, device)
        self.staging = StepStaging(config.num_envs, config.env.obs_dim, device)
        self.check_on_device = device.type != "cpu"
        self.obs: np.ndarray = self.env.reset(seed=env_seeds(config.seed, rank, config.num_envs))[0]  # [N, D]
        self.episode_start = np.ones(config.num_envs, dtype=bool)  # [N]
        self.lstm_state: LSTMState = agent.initial_state(config.num_envs, device)  # ([1, N, H], [1, N, H])
        # --norm-value: the critic's outputs are normalised values, de-normalised wherever a value is kept
        self.value_norm: Optional[RunningMeanStd] = RunningMeanStd() if config.norm_value else None

    def restart(self, generation: int) -> None:
        """New episodes in every env, from seeds of ``generation``, and a zero LSTM state (a
        resume that changed the layout, or whose saved rollout state could not be restored)."""
        self.obs = self.env.reset(seed=env_seeds(self.config.seed, self.rank, self.num_envs, generation))[0]
        self.episode_start = np.ones(self.num_envs, dtype=bool)
        self.lstm_state = self.agent.initial_state(self.num_envs, self.device)

    def reseed_sampler(self, generation: int) -> None:
        """A fresh action-sampler stream for ``generation`` (a resume on another device type,
        whose saved generator state this device cannot take)."""
        self.sample_generator = torch.Generator(self.device).manual_seed(
            derive_seed(self.config.seed, self.rank, 11, generation))

    def collect(self, update: int) -> np.ndarray:
        """Step the envs T times, filling the buffer. Returns the records ``[k, 6]``
        (:data:`EPISODE_FIELDS`) of every episode that finished, in step then env order.

        A time-limit truncation is bootstrapped by adding gamma * V(final obs) to that
        step's reward (the final obs is valued with the episode's own LSTM state). Step
        t's reward reaches the device with step t+1's inputs (the last one in :meth:`finish`).
        With ``--norm-value`` the stored values are de-normalised (:attr:`value_norm`).
        """
        records = []
        stage = self.staging
        self.buffer.initial_h.copy_(self.lstm_state[0])
        self.buffer.initial_c.copy_(self.lstm_state[1])
        stage.put_inputs(self.obs, self.episode_start)
        weights = self.agent.step_weights()  # fetched once: the parameters do not change in a rollout
        obs, starts = stage.obs, stage.starts  # [N, D], [N]: the staged inputs, rewritten every step
        h, c = self.lstm_state[0][0], self.lstm_state[1][0]  # [N, H]: no layer dimension inside the loop
        with torch.no_grad():  # once for the rollout (the env's NumPy is indifferent to it)
            for t in range(self.steps):
                stage.upload()
                if t > 0:
                    self._store_rewards(t - 1, h, c)
                logits, values, h, c = self.agent.step_cell(
                    obs, h, c, starts, bool(self.episode_start.any()), weights)  # [N, A], [N], [N, H], [N, H]
                actions, host_actions = sample_actions(logits, self.sample_generator, self.check_on_device, update)
                log_probs = logits.log_softmax(-1).gather(-1, actions[:, None])[:, 0]  # [N]
                self.buffer.add(t, obs, starts, actions, log_probs, self._in_reward_units(values))
                self.obs, rewards, terminated, truncated, info = self.env.step(host_actions)
                cut = truncated & ~terminated
                self.episode_start = terminated | truncated
                stage.put_outcome(rewards, cut, info.get("final_obs"))
                stage.put_inputs(self.obs, self.episode_start)
                if "_episode" in info:
                    records.append(episode_records(info["episode"], np.flatnonzero(info["_episode"])))
        self.lstm_state = (h[None], c[None])  # ([1, N, H], [1, N, H])
        if not self.check_on_device and not bool(torch.isfinite(self.buffer.log_probs).all()):
            raise TrainingError(f"the policy gave non-finite outputs after update {update} (a probability "
                                f"is NaN or infinite); {NON_FINITE_ADVICE}")
        return np.concatenate(records) if records else np.zeros((0, len(EPISODE_FIELDS)))

    def bootstrap(self) -> tuple[Tensor, Tensor]:
        """Close the rollout: the last step's rewards (time-limit cuts valued), and the value
        ``[N]`` of the observation after the rollout with whether it starts an episode ``[N]``,
        which GAE (:meth:`RolloutBuffer.finish`) bootstraps from."""
        self.staging.upload()
        with torch.no_grad():
            self._store_rewards(self.steps - 1, self.lstm_state[0][0], self.lstm_state[1][0])
            _, values, _ = self.agent(self.staging.obs[None], self.lstm_state, self.staging.starts[None])
        return self._in_reward_units(values[0]), self.staging.starts

    def finish(self) -> RolloutBatch:
        """The rollout as a batch ``[T, N]`` with GAE advantages: :meth:`bootstrap`, then GAE."""
        return self.buffer.finish(*self.bootstrap(), self.config.gamma, self.config.gae_lambda)

    def _store_rewards(self, t: int, h: Tensor, c: Tensor) -> None:
        """Step ``t``'s rewards from the staging buffer into the rollout buffer, plus
        gamma * V(final obs) where the time limit cut an episode (valued with the LSTM
        state after step ``t``: ``h``, ``c`` ``[N, H]``)."""
        rewards = self.buffer.rewards[t]
        rewards.copy_(self.staging.rewards)
        if self.staging.cut_count:
            rewards += self.config.gamma * self._final_values(*self.staging.cut(), h, c)

    def _final_values(self, index: Tensor, final_obs: Tensor, h: Tensor, c: Tensor) -> Tensor:
        """``[N]`` values of the final observations ``[k, D]`` of envs ``index`` ``[k]``, 0 elsewhere,
        each valued with its env's LSTM state in ``h``, ``c`` ``[N, H]``."""
        _, values, _ = self.agent(final_obs[None], (h[None, index], c[None, index]),
                                  torch.zeros(1, len(index), device=self.device))
        out = torch.zeros(self.num_envs, device=self.device)
        out[index] = self._in_reward_units(values[0])
        return out

    def _in_reward_units(self, values: Tensor) -> Tensor:
        """The critic's ``values`` ``[k]``, de-normalised with ``--norm-value`` (else as they are)."""
        return values if self.value_norm is None else self.value_norm.denormalize(values)

    def state(self) -> dict[str, Any]:
        """The sampler (with the device type whose layout its state has), env, observation,
        episode-start and LSTM state (numpy arrays and CPU tensors)."""
        return {
            "sample_generator": self.sample_generator.get_state().cpu(),
            "sampler_device": self.device.type,
            "env": self.env.get_state(),
            "obs": self.obs.copy(),
            "episode_start": self.episode_start.copy(),
            "lstm_h": self.lstm_state[0].detach().cpu().clone(),
            "lstm_c": self.lstm_state[1].detach().cpu().clone(),
        }

    def load_state(self, state: dict[str, Any], generation: int) -> Optional[str]:
        """Inverse of :meth:`state`. A sampler state written on another device type (a CPU
        generator's state is 5,056 bytes, a CUDA one's 16) cannot be taken: the sampler is
        then re-seeded for ``generation`` and the note to print is returned (else None).
        Raises on a state that does not fit at all (the caller restarts the envs)."""
        saved_device = state.get("sampler_device")  # checkpoints written before it was recorded carry none
        note = None
        if saved_device not in (None, self.device.type):
            note = (f"the action sampler's state was written on {saved_device} and this run is on "
                    f"{self.device.type}: the sampler was re-seeded (from --seed, the rank and update {generation})")
        else:
            probe = torch.Generator(self.device)
            probe.set_state(state["sample_generator"].to("cpu"))  # raises on a foreign layout, before any change
        obs, starts = np.asarray(state["obs"]), np.asarray(state["episode_start"])
        h, c = state["lstm_h"].to(self.device), state["lstm_c"].to(self.device)
        expected = (self.num_envs, self.config.env.obs_dim)
        if obs.shape != expected or starts.shape != (self.num_envs,) or h.shape != self.lstm_state[0].shape \
                or c.shape != self.lstm_state[1].shape:
            raise ValueError(f"saved rollout shapes obs {obs.shape}, LSTM {tuple(h.shape)} do not fit "
                             f"obs {expected}, LSTM {tuple(self.lstm_state[0].shape)}")
        self.env.set_state(state["env"])
        if note is None:
            self.sample_generator = probe
        else:
            self.reseed_sampler(generation)
        self.obs, self.episode_start, self.lstm_state = obs, starts, (h, c)
        return note
