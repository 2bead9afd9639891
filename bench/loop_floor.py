"""The floor: what PyTorch itself needs for the training loop's work, against what the trainer takes.

One process, one torch thread. For the trainer's network (MLP 64x64, one LSTM of 64, the
regime market's obs and actions) and batch, at two configurations (``defaults``: 8 envs x
16 steps; ``matched``: 8 envs x 128 steps; both 4 epochs x 4 minibatches), it times:

* **rollout floor**: one policy step of the 8 envs in bare PyTorch calls on the same
  weights (held in locals), under ``no_grad``: encoder, ``torch.lstm_cell``, both heads,
  softmax sampling (``torch.multinomial``'s draw in its four ops, as the trainer makes it),
  the log-prob, and the copy of the step into a ``[T, N]`` buffer;
* **env step**: one ``VectorTradingEnv.step`` of the 8 envs with random actions (NumPy,
  not PyTorch: the trainer's rollout pays it too, so the rollout floor adds it);
* **rollout floor in one loop**: the two alternating in one loop, as one thread must run
  them (the actions to the env, its observations, rewards and episode starts back; the
  rewards stored too). Run between torch calls, the env step costs more, and so do the torch
  calls after it (bench/results/loop_floor_evidence.md says why), so this floor is above the sum of the two;
* **gradient floor**: one minibatch step: the forward over the minibatch's sequences
  (``[T, B]``, the layers as functions and one call of the LSTM op, no episode splits), the PPO loss (clipped ratio, value loss,
  entropy, advantage normalisation), backward, global-norm clipping and the trainer's own
  Adam (fused), with ``zero_grad(set_to_none=True)``;
* **trainer**: ``Trainer.run`` on the same sizes; its phase timers give seconds per env
  step (a ``rollout`` phase: T steps of N envs, GAE and the bootstrap value included) and
  per gradient step (an ``update`` phase / (epochs x minibatches): minibatch selection,
  the guard's snapshot and finiteness check and the statistics included).

Each floor is timed over windows of the same work as one trainer phase (a rollout of T
steps; an update of E x M gradient steps); every figure is the quickest window (the
least-disturbed one on a shared machine), over all windows of ``--repeats`` interleaved
rounds. The JSON line also has the trainer's means over whole runs. Ratios: trainer rollout per env step /
(rollout floor + env step) per env step, trainer rollout / rollout floor in one loop, and
trainer update per gradient step / gradient floor. ``--profile`` also prints ``torch.profiler``'s top operators of one trainer run.

    python bench/loop_floor.py [--repeats 5] [--steps 8192] [--profile]

Prints a table and one JSON line.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Iterator, Optional  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.config import EnvConfig  # noqa: E402
from envs.vector import VectorTradingEnv  # noqa: E402
from ppo_lstm.algo.agent import RecurrentActorCritic  # noqa: E402
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker  # noqa: E402
from ppo_lstm.train.build import build_agent, build_optimizer  # noqa: E402
from ppo_lstm.config.plan import learning_rates
from ppo_lstm.train.shutdown import StopRequest  # noqa: E402
from ppo_lstm.train.timing import PhaseClock  # noqa: E402
from ppo_lstm.train.trainer import Trainer  # noqa: E402

NUM_ENVS, EPOCHS, MINIBATCHES, SIZE = 8, 4, 4, 64
CONFIGS = {"defaults": 16, "matched": 128}  # rollout steps per env and update


def train_config(steps_per_env: int, total_steps: int, tmp: str) -> TrainConfig:
    env = EnvConfig(market="regime")
    return TrainConfig(episodes=max(NUM_ENVS, total_steps // env.episode_length), num_envs=NUM_ENVS,
                       update_interval=NUM_ENVS * steps_per_env, epochs=EPOCHS, minibatches=MINIBATCHES,
                       hidden_size=SIZE, lstm_size=SIZE, progress=False, log_file=os.path.join(tmp, "log"),
                       checkpoint_dir=tmp, checkpoint_interval=10**9, log_interval=10**9, holdout=0.0, env=env)


def bare_rollout(agent: RecurrentActorCritic, obs: torch.Tensor, starts: torch.Tensor, buffers: dict[str, torch.Tensor],
                 gen: torch.Generator, steps: int, env: Optional[VectorTradingEnv] = None) -> float:
    """Seconds for ``steps`` policy steps of ``obs``' N envs ``[N, D]`` in bare PyTorch calls, under
    ``no_grad``, into ``buffers`` (``obs`` ``[T, N, D]``, ``starts``, ``actions``, ``log_probs``,
    ``values``, ``rewards`` ``[T, N]``), from a zero LSTM state.

    With ``env``, each step's actions also go to ``env.step``, in the same loop, and its
    observations (a zero-copy view), rewards and episode starts come back for the next step:
    the least a rollout that steps its envs in the same thread does.

    The weights are held in locals (no module attribute lookups in the loop), and the draw is
    ``torch.multinomial``'s own in its four ops (an empty tensor, ``exponential_``, ``div``,
    ``argmax``: bit for bit multinomial's, without its input checks), the cheapest way known here."""
    w1, b1, w2, b2, wih, whh, bih, bhh, pw, pb, vw, vb = agent.step_weights()
    buf_obs, buf_starts, buf_actions = buffers["obs"], buffers["starts"], buffers["actions"]
    buf_log_probs, buf_values, buf_rewards = buffers["log_probs"], buffers["values"], buffers["rewards"]
    n, size = obs.shape[0], whh.shape[1]
    with torch.no_grad():
        h, c = torch.zeros(n, size), torch.zeros(n, size)
        tic = time.perf_counter()
        for t in range(steps):
            x = torch.tanh(F.linear(torch.tanh(F.linear(obs, w1, b1)), w2, b2))
            h, c = torch.lstm_cell(x, (h, c), wih, whh, bih, bhh)
            logits = F.linear(h, pw, pb)
            value = F.linear(h, vw, vb)
            probs = logits.softmax(-1)
            race = torch.empty_like(probs).exponential_(1.0, generator=gen)
            action = torch.div(probs, race, out=race).argmax(-1, keepdim=True)
            log_prob = logits.log_softmax(-1).gather(-1, action)
            buf_obs[t] = obs
            buf_starts[t] = starts
            buf_actions[t] = action[:, 0]
            buf_log_probs[t] = log_prob[:, 0]
            buf_values[t] = value[:, 0]
            actions = action.numpy()[:, 0]  # the actions the envs get
            if env is not None:
                observations, rewards, terminated, truncated, _ = env.step(actions)
                obs = torch.from_numpy(observations)
                buf_rewards[t] = torch.from_numpy(rewards)
                starts = torch.from_numpy(terminated | truncated)
        return time.perf_counter() - tic


def rollout_floor(config: TrainConfig, steps: int, rounds: int = 20, with_env: bool = False) -> float:
    """Seconds per policy step of N envs, bare PyTorch (minimum over ``rounds`` rollouts of
    ``steps``, each :func:`bare_rollout`); ``with_env``: stepping a ``VectorTradingEnv`` in the
    same loop (the floor of a one-thread rollout)."""
    agent = build_agent(config)
    n, d = NUM_ENVS, config.env.obs_dim
    gen = torch.Generator().manual_seed(0)
    obs, starts = torch.randn(n, d), torch.zeros(n)
    env = None
    if with_env:
        env = VectorTradingEnv(n, config.env)
        obs = torch.from_numpy(env.reset(seed=list(range(n)))[0])
    buffers = {name: torch.zeros(steps, n) for name in ("starts", "actions", "log_probs", "values", "rewards")}
    buffers["obs"] = torch.zeros(steps, n, d)
    return min(bare_rollout(agent, obs, starts, buffers, gen, steps, env) for _ in range(rounds)) / steps


def env_step(config: TrainConfig, steps: int, rounds: int = 20) -> float:
    """Seconds per ``VectorTradingEnv.step`` of N envs with random actions (minimum over rounds)."""
    env = VectorTradingEnv(NUM_ENVS, config.env)
    env.reset(seed=list(range(NUM_ENVS)))
    rng = np.random.default_rng(0)
    actions = rng.integers(0, config.env.num_actions, size=(rounds, steps, NUM_ENVS))
    best = float("inf")
    for r in range(rounds):
        tic = time.perf_counter()
        for t in range(steps):
            env.step(actions[r, t])
        best = min(best, (time.perf_counter() - tic) / steps)
    return best


def gradient_floor(config: TrainConfig, steps: int, rounds: int = 10) -> float:
    """Seconds per minibatch gradient step, bare PyTorch (minimum over ``rounds`` updates of E x M steps)."""
    agent = build_agent(config)
    optimizer = build_optimizer(agent, learning_rates(config))
    params = list(agent.parameters())
    e1, e2, lstm, pol, val = agent.encoder[0], agent.encoder[2], agent.lstm, agent.policy_head, agent.value_head
    b, d = NUM_ENVS // MINIBATCHES, config.env.obs_dim
    gen = torch.Generator().manual_seed(0)
    mbs = [{"obs": torch.randn(steps, b, d, generator=gen), "actions": torch.randint(0, 3, (steps, b), generator=gen),
            "log_probs": torch.full((steps, b), -1.1), "values": torch.randn(steps, b, generator=gen),
            "adv": torch.randn(steps, b, generator=gen), "returns": torch.randn(steps, b, generator=gen),
            "h": torch.zeros(1, b, SIZE), "c": torch.zeros(1, b, SIZE)} for _ in range(MINIBATCHES)]
    clip, best = 0.2, float("inf")
    for _ in range(rounds):
        tic = time.perf_counter()
        for _epoch in range(EPOCHS):
            for mb in mbs:
                feats = torch.tanh(F.linear(torch.tanh(F.linear(mb["obs"], e1.weight, e1.bias)), e2.weight, e2.bias))
                out, _, _ = torch.lstm(feats, (mb["h"], mb["c"]), lstm._flat_weights, True, 1, 0.0, True, False,
                                       False)  # [T, b, H]: nn.LSTM's own op, without its per-call Python
                logits, values = F.linear(out, pol.weight, pol.bias), F.linear(out, val.weight, val.bias).squeeze(-1)
                all_lp = logits.log_softmax(-1)
                new_lp = all_lp.gather(-1, mb["actions"].unsqueeze(-1)).squeeze(-1)
                entropy = -(all_lp.exp() * all_lp).sum(-1).mean()
                ratio = (new_lp - mb["log_probs"]).exp()
                adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                value_loss = 0.5 * ((values - mb["returns"]) ** 2).mean()
                loss = policy_loss - 0.01 * entropy + 0.5 * value_loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
                optimizer.step()
        best = min(best, (time.perf_counter() - tic) / (EPOCHS * MINIBATCHES))
    return best


class IntervalClock(PhaseClock):
    """The trainer's phase clock, also keeping every interval: ``intervals[phase]`` [updates] seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.intervals: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        before = self.seconds[phase]
        with super().__call__(phase):
            yield
        self.intervals[phase].append(self.seconds[phase] - before)


def trainer_costs(config: TrainConfig, steps: int) -> dict[str, float]:
    """The trainer's seconds per env step (its quickest rollout phase / T N) and per gradient step
    (its quickest update phase / E M): the same statistic as the floors' (the least-disturbed
    window of the same work), and the means over the run beside them."""
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
        trainer.clock = clock = IntervalClock()
        trainer.run()
    s = trainer.state
    return {"per_env_step": min(clock.intervals["rollout"]) / (steps * NUM_ENVS),
            "per_gradient_step": min(clock.intervals["update"]) / (EPOCHS * MINIBATCHES),
            "mean_per_env_step": clock.seconds["rollout"] / s.env_steps,
            "mean_per_gradient_step": clock.seconds["update"] / (s.update * EPOCHS * MINIBATCHES),
            "env_steps": s.env_steps, "updates": s.update}


def profile_trainer(config: TrainConfig, rows: int) -> str:
    """torch.profiler's operator table (by self CPU time) of one trainer run."""
    from torch.profiler import ProfilerActivity, profile

    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.run()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the four measurements (minimum)")
    parser.add_argument("--steps", type=int, default=8192, help="env steps per trainer run")
    parser.add_argument("--profile", action="store_true", help="also print torch.profiler's top operators")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs: dict[str, dict[str, list[Any]]] = {n: {k: [] for k in ("rollout_floor", "env_step", "rollout_floor_env",
                                                                   "gradient_floor", "trainer")} for n in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, steps in CONFIGS.items():
                config = train_config(steps, args.steps, tmp)
                r = runs[name]
                windows = max(1, args.steps // (NUM_ENVS * steps))  # as many as the trainer's updates
                r["rollout_floor"].append(rollout_floor(config, steps, windows))
                r["env_step"].append(env_step(config, steps, windows))
                r["rollout_floor_env"].append(rollout_floor(config, steps, windows, with_env=True))
                r["gradient_floor"].append(gradient_floor(config, steps, windows))
                r["trainer"].append(trainer_costs(config, steps))
        profiles = {n: profile_trainer(train_config(t, args.steps, tmp), 25) for n, t in CONFIGS.items()} \
            if args.profile else {}
    table: dict[str, dict[str, float]] = {}
    print(f"{'config':<10}{'batch':>6}  {'per env step (us)':<62}{'per gradient step (us)':<34}")
    print(f"{'':<16}{'floor':>8}{'+env':>8}{'=':>8}{'ratio':>7}{'1 loop':>9}{'ratio':>7}{'trainer':>9}   "
          f"{'floor':>8}{'trainer':>9}{'ratio':>7}")
    for name, steps in CONFIGS.items():
        r = runs[name]
        floor, env = min(r["rollout_floor"]) / NUM_ENVS, min(r["env_step"]) / NUM_ENVS
        one_loop = min(r["rollout_floor_env"]) / NUM_ENVS
        grad = min(r["gradient_floor"])
        ours_step = min(t["per_env_step"] for t in r["trainer"])
        ours_grad = min(t["per_gradient_step"] for t in r["trainer"])
        table[name] = {"rollout_floor_per_env_step_s": floor, "env_step_per_env_step_s": env,
                       "rollout_floor_with_env_per_env_step_s": one_loop,
                       "trainer_per_env_step_s": ours_step, "rollout_ratio": ours_step / (floor + env),
                       "rollout_ratio_one_loop": ours_step / one_loop,
                       "gradient_floor_s": grad, "trainer_per_gradient_step_s": ours_grad,
                       "gradient_ratio": ours_grad / grad}
        print(f"{name:<10}{NUM_ENVS * steps:>6}{1e6 * floor:>8.1f}{1e6 * env:>8.1f}{1e6 * (floor + env):>8.1f}"
              f"{ours_step / (floor + env):>6.2f}x{1e6 * one_loop:>9.1f}{ours_step / one_loop:>6.2f}x"
              f"{1e6 * ours_step:>9.1f}   {1e6 * grad:>8.0f}{1e6 * ours_grad:>9.0f}{ours_grad / grad:>6.2f}x")
    print(f"minimum of {args.repeats} interleaved repeats each, one thread; floor = bare PyTorch, +env = "
          f"VectorTradingEnv.step, each in a loop of its own; 1 loop = the two alternating in one loop; "
          f"per env step = per policy step / {NUM_ENVS} envs")
    for name, text in profiles.items():
        print(f"\ntorch.profiler, trainer at {name} ({args.steps} env steps), by self CPU time:\n{text}")
    print(json.dumps({"bench": "loop_floor", "threads": 1, "repeats": args.repeats, "trainer_steps": args.steps,
                      "configs": {n: {"envs": NUM_ENVS, "steps_per_env": t, "epochs": EPOCHS,
                                      "minibatches": MINIBATCHES, "size": SIZE} for n, t in CONFIGS.items()},
                      "results": table, "runs": runs}))


if __name__ == "__main__":
    main()
