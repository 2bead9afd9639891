"""Where the rollout's time goes: its parts timed one by one, as the trainer runs them.

One process, one torch thread, the trainer's default config (``TrainConfig()``: 8 envs,
a batch of 128, so rollouts of T = 16 steps; the simulated ``mixed`` market; MLP and
LSTM 64), and the project's own ``RolloutCollector`` and agent. It times:

* **parts**: one rollout step's parts in the order ``RolloutCollector.collect`` runs them,
  in one loop (:func:`timed_collect`, the same code with a clock read between parts):
  the staged rewards (``_store_rewards``), the policy step (``agent.step_cell``), sampling
  (``sample_actions``), the log-prob, the buffer writes (``buffer.add``), the env step
  (``VectorTradingEnv.step``), and the staging writes and episode records; ``rest`` is the
  window's time that no part holds (the staging upload, the loop, the clock);
* **collect()** itself, uninstrumented, alternating with the timed copy (the clock's cost);
* **finish()** per rollout (the last rewards, the bootstrap value, GAE, the hand-over copies);
* **alternation**: the env step in a loop of env steps alone (random actions) and the
  step's torch work (``agent.step_cell``, sampling, log-prob, ``buffer.add``: :func:`policy_step`)
  in a loop of it alone, against the two alternating in one loop (the policy's actions to the env,
  the env's observations staged for the policy), the three loops interleaved window by window.
  The same loop of ``bench/loop_floor.py``'s bare calls (:func:`bare_rollout`), interleaved
  with them, gives the torch work's floor in the same conditions, alone and with the env
  step in its loop (the floor of a one-thread rollout);
* **after an update**: ``collect()`` + ``finish()`` right after another rollout, and right
  after an update's work (``bench/loop_floor.py``'s gradient floor: an agent built, then its
  E x M gradient steps), alternating: what the trainer's rollout pays for following an update;
* **alternation controls**: the env step alternating with other work instead of the policy's
  torch work: one small torch op repeated, a sweep over 4 MiB of NumPy data, and Python
  arithmetic (:func:`control_works`), in the same interleaving. Which kind of work slows the
  env step that follows it tells what the alternation costs (code, data, or neither).

A window is one rollout (T policy steps of the N envs); every figure is per policy step
of the N envs (a part's time over the window / T), the quickest window (the least
disturbed) and the median window, over ``--windows`` windows of each kind.

    python bench/rollout_parts.py [--windows 2000]

Prints a table and one JSON line.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.loop_floor import bare_rollout, gradient_floor, train_config  # noqa: E402
from ppo_lstm.algo.agent import StepWeights  # noqa: E402
from ppo_lstm.algo.episodes import EPISODE_FIELDS, episode_records  # noqa: E402
from ppo_lstm.algo.rollout import RolloutCollector, sample_actions  # noqa: E402
from ppo_lstm.config.plan import steps_per_env
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.train.build import build_agent  # noqa: E402

PARTS = ("staged rewards", "policy step", "sampling", "log-prob", "buffer writes", "env step",
         "staging writes, episode records")
clock: Callable[[], int] = time.perf_counter_ns


def make_collector(config: TrainConfig) -> RolloutCollector:
    """The trainer's rollout collector for ``config`` on the CPU (rank 0, simulated market),
    built as the trainer builds it."""
    torch.manual_seed(config.seed)
    return RolloutCollector(config, build_agent(config), 0, steps_per_env(config), torch.device("cpu"), None)


def timed_collect(c: RolloutCollector, update: int, ns: dict[str, int]) -> np.ndarray:
    """``c.collect(update)``, the same statements in the same order, adding each part's
    nanoseconds to ``ns[part]`` and the whole window's to ``ns["window"]``."""
    start = clock()
    records = []
    stage = c.staging
    c.buffer.initial_h.copy_(c.lstm_state[0])
    c.buffer.initial_c.copy_(c.lstm_state[1])
    stage.put_inputs(c.obs, c.episode_start)
    weights = c.agent.step_weights()
    obs, starts = stage.obs, stage.starts
    h, cell = c.lstm_state[0][0], c.lstm_state[1][0]
    with torch.no_grad():
        for t in range(c.steps):
            stage.upload()
            t0 = clock()
            if t > 0:
                c._store_rewards(t - 1, h, cell)
            t1 = clock()
            logits, values, h, cell = c.agent.step_cell(obs, h, cell, starts, bool(c.episode_start.any()), weights)
            t2 = clock()
            actions, host_actions = sample_actions(logits, c.sample_generator, c.check_on_device, update)
            t3 = clock()
            log_probs = logits.log_softmax(-1).gather(-1, actions[:, None])[:, 0]
            t4 = clock()
            c.buffer.add(t, obs, starts, actions, log_probs, values)
            t5 = clock()
            c.obs, rewards, terminated, truncated, info = c.env.step(host_actions)
            t6 = clock()
            cut = truncated & ~terminated
            c.episode_start = terminated | truncated
            stage.put_outcome(rewards, cut, info.get("final_obs"))
            stage.put_inputs(c.obs, c.episode_start)
            if "_episode" in info:
                records.append(episode_records(info["episode"], np.flatnonzero(info["_episode"])))
            t7 = clock()
            for part, a, b in zip(PARTS, (t0, t1, t2, t3, t4, t5, t6), (t1, t2, t3, t4, t5, t6, t7)):
                ns[part] += b - a
    c.lstm_state = (h[None], cell[None])
    if not bool(torch.isfinite(c.buffer.log_probs).all()):
        raise RuntimeError(f"the policy gave non-finite outputs after update {update}")
    out = np.concatenate(records) if records else np.zeros((0, len(EPISODE_FIELDS)))
    ns["window"] += clock() - start
    return out


def policy_step(c: RolloutCollector, t: int, weights: StepWeights, state: list[torch.Tensor]) -> np.ndarray:
    """The rollout step's torch work as ``collect`` does it (agent.step_cell, sampling, log-prob,
    buffer.add) on the staged inputs, with the rollout's ``weights`` and LSTM ``state`` ``[h, c]``
    (each ``[N, H]``, replaced in place); the host actions. Call it under ``torch.no_grad()``,
    as ``collect`` runs its loop."""
    stage = c.staging
    obs, starts = stage.obs, stage.starts
    logits, values, state[0], state[1] = c.agent.step_cell(obs, state[0], state[1], starts,
                                                           bool(c.episode_start.any()), weights)
    actions, host_actions = sample_actions(logits, c.sample_generator, c.check_on_device, 0)
    log_probs = logits.log_softmax(-1).gather(-1, actions[:, None])[:, 0]
    c.buffer.add(t, obs, starts, actions, log_probs, values)
    return host_actions


def alternation_window(c: RolloutCollector, mode: str, actions: np.ndarray) -> tuple[int, int]:
    """One window of T steps: (env-step ns, policy-step ns) summed. ``mode``: "env" (env steps
    alone, ``actions`` [T, N]), "policy" (policy steps alone) or "both" (alternating)."""
    env_ns = policy_ns = 0
    weights = c.agent.step_weights()
    state = [c.lstm_state[0][0], c.lstm_state[1][0]]
    with torch.no_grad():  # once per window, as collect() does
        for t in range(c.steps):
            if mode != "env":
                tic = clock()
                host_actions = policy_step(c, t, weights, state)
                policy_ns += clock() - tic
            if mode != "policy":
                step_actions = actions[t] if mode == "env" else host_actions
                tic = clock()
                c.obs, _, terminated, truncated, _ = c.env.step(step_actions)
                env_ns += clock() - tic
                c.episode_start = terminated | truncated
            else:  # no env: no episode starts after the first step (as in most steps of the other loops)
                c.episode_start = np.zeros_like(c.episode_start)
            c.staging.put_inputs(c.obs, c.episode_start)  # untimed: the policy's next inputs
    c.lstm_state = (state[0][None], state[1][None])
    return env_ns, policy_ns


def control_works() -> dict[str, Callable[[], object]]:
    """Work of other kinds to alternate with the env step, each about as long as the policy
    step's torch work or less: which kind slows the env step that follows it?"""
    x = torch.randn(8, 64)
    sweep = [np.zeros(64 * 1024) for _ in range(8)]  # 8 x 512 KiB: 4 MiB of float64, more than a core's L2

    def one_torch_op() -> None:  # the same small torch op 60 times: little code, the dispatcher's path warm
        for _ in range(60):
            torch.add(x, x)

    def numpy_sweep() -> None:  # data: every cache line of 4 MiB read and written
        for a in sweep:
            a += 1.0

    def python_work() -> None:  # the interpreter alone
        total = 0
        for i in range(6000):
            total += i

    return {"one torch op x60": one_torch_op, "a 4 MiB NumPy sweep": numpy_sweep, "Python arithmetic": python_work}


def control_window(c: RolloutCollector, work: Callable[[], object], actions: np.ndarray) -> tuple[int, int]:
    """One window of T env steps (``actions`` [T, N]), each after one call of ``work``:
    (env-step ns, work ns) summed."""
    env_ns = work_ns = 0
    for t in range(c.steps):
        tic = clock()
        work()
        work_ns += clock() - tic
        tic = clock()
        c.obs, _, terminated, truncated, _ = c.env.step(actions[t])
        env_ns += clock() - tic
        c.episode_start = terminated | truncated
        c.staging.put_inputs(c.obs, c.episode_start)
    return env_ns, work_ns


def quick_and_median(samples: list[float]) -> dict[str, float]:
    return {"min": min(samples), "median": statistics.median(samples)}


def measure(config: TrainConfig, windows: int) -> dict[str, dict[str, dict[str, float]]]:
    """Microseconds per policy step of N envs ({"min", "median"} over windows), and per rollout for finish()."""
    c = make_collector(config)
    T = c.steps
    per_step: dict[str, list[float]] = {k: [] for k in (*PARTS, "rest", "timed window", "collect()")}
    finish: list[float] = []
    for update in range(windows):
        ns = dict.fromkeys((*PARTS, "window"), 0)
        timed_collect(c, update, ns)
        tic = clock()
        c.finish()
        finish.append((clock() - tic) / 1e3)
        for part in PARTS:
            per_step[part].append(ns[part] / T / 1e3)
        per_step["rest"].append((ns["window"] - sum(ns[p] for p in PARTS)) / T / 1e3)
        per_step["timed window"].append(ns["window"] / T / 1e3)
        tic = clock()
        c.collect(update)
        per_step["collect()"].append((clock() - tic) / T / 1e3)
        tic = clock()
        c.finish()
        finish.append((clock() - tic) / 1e3)

    alt = {k: [] for k in ("env step alone", "env step alternating", "torch work alone", "torch work alternating",
                           "the floor's bare calls alone", "the floor's bare calls and the env step, one loop")}
    envs = {mode: make_collector(config) for mode in ("env", "policy", "both")}
    floor = make_collector(config)  # its agent and staged inputs, for bench/loop_floor.py's bare rollout
    floor_env = make_collector(config)  # its agent and env, for the bare rollout with the env step in its loop
    floor_buffers = {name: torch.zeros(T, config.num_envs)
                     for name in ("starts", "actions", "log_probs", "values", "rewards")}
    floor_buffers["obs"] = torch.zeros(T, config.num_envs, config.env.obs_dim)
    floor_generator = torch.Generator().manual_seed(0)
    works = control_works()
    controls: dict[str, list[float]] = {}
    control_envs = {name: make_collector(config) for name in works}
    rng = np.random.default_rng(0)
    for _ in range(windows):  # every kind of window in turn, so that all see the same conditions
        for mode, collector in envs.items():
            actions = rng.integers(0, config.env.num_actions, size=(T, config.num_envs))
            env_ns, policy_ns = alternation_window(collector, mode, actions)
            if mode != "policy":
                alt["env step alone" if mode == "env" else "env step alternating"].append(env_ns / T / 1e3)
            if mode != "env":
                alt["torch work alone" if mode == "policy" else "torch work alternating"].append(policy_ns / T / 1e3)
        seconds = bare_rollout(floor.agent, floor.staging.obs, floor.staging.starts, floor_buffers, floor_generator, T)
        alt["the floor's bare calls alone"].append(seconds / T * 1e6)
        seconds = bare_rollout(floor_env.agent, torch.from_numpy(floor_env.obs), floor_env.staging.starts,
                               floor_buffers, floor_generator, T, floor_env.env)
        alt["the floor's bare calls and the env step, one loop"].append(seconds / T * 1e6)
        for name, work in works.items():
            actions = rng.integers(0, config.env.num_actions, size=(T, config.num_envs))
            env_ns, work_ns = control_window(control_envs[name], work, actions)
            controls.setdefault(f"env step after {name}", []).append(env_ns / T / 1e3)
            controls.setdefault(f"{name}, its own time", []).append(work_ns / T / 1e3)
    after: dict[str, list[float]] = {"collect() + finish() after a rollout": [],
                                     "collect() + finish() after an update's work": []}
    update_config = train_config(T, T * config.num_envs, "unused")  # the same sizes; no run, so no files
    for update in range(windows):
        for name, samples in after.items():
            if name.endswith("rollout"):
                c.collect(update)
                c.finish()
            else:  # bench/loop_floor.py's gradient floor: an agent built, then E x M gradient steps
                gradient_floor(update_config, T, rounds=1)
            tic = clock()
            c.collect(update)
            c.finish()
            samples.append((clock() - tic) / T / 1e3)
    empty = []
    for _ in range(10_000):
        tic = clock()
        empty.append(clock() - tic)
    return {"parts": {k: quick_and_median(v) for k, v in per_step.items()},
            "finish": {"finish() per rollout": quick_and_median(finish)},
            "alternation": {k: quick_and_median(v) for k, v in alt.items()},
            "alternation controls": {k: quick_and_median(v) for k, v in controls.items()},
            "after an update": {k: quick_and_median(v) for k, v in after.items()},
            "clock": {"empty clock pair": quick_and_median([e / 1e3 for e in empty])}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=2000, help="rollouts timed of each kind")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = TrainConfig(progress=False)
    result = measure(config, args.windows)
    steps = steps_per_env(config)
    headings = {"parts": f"rollout step's parts, in collect()'s order (us per policy step of {config.num_envs} envs)",
                "finish": "per rollout (us)",
                "alternation": f"alternation (us per policy step of {config.num_envs} envs; torch work: policy step, "
                               "sampling, log-prob, buffer writes; the floor: bench/loop_floor.py's bare calls)",
                "alternation controls": "the env step alternating with other work (us per policy step)",
                "after an update": "a rollout after a rollout, and after an update's work (us per policy step)",
                "clock": "the clock (us)"}
    width = max(map(len, headings.values()))
    for group, rows in result.items():
        print(f"{headings[group]:<{width}}{'min':>9}{'median':>9}")
        for name, v in rows.items():
            print(f"  {name:<{width - 2}}{v['min']:>9.1f}{v['median']:>9.1f}")
    print(f"{args.windows} windows of each kind (a window: one rollout of T = {steps} policy steps of "
          f"{config.num_envs} envs); min = quickest window, one thread")
    print(json.dumps({"bench": "rollout_parts", "threads": 1, "windows": args.windows, "envs": config.num_envs,
                      "steps_per_env": steps, "market": config.env.market, "unit": "us", "results": result}))


if __name__ == "__main__":
    main()
