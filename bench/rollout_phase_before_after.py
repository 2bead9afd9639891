"""The trainer's rollout phase of this checkout against that of another, in one process.

Runs ``Trainer.run`` of the two versions alternately (one thread, the sizes of
``bench/loop_floor.py``: 8 envs, 4 x 4 minibatches, MLP and LSTM 64, the regime market),
at the default batch (8 x 16) and the matched one (8 x 128), and prints, per version,
the quickest rollout phase per env step (the statistic loop_floor.py reports, over
every rollout of every round) and the mean over the runs. It also checks that both
versions end every run with bitwise-equal weights and Adam state. Prints the lines of
the comparison and one JSON line.

    git archive 01b5c5d | tar -x -C /tmp/before && python bench/rollout_phase_before_after.py /tmp/before
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
from typing import Any  # noqa: E402

import torch  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(tree: str) -> dict[str, Any]:
    """The classes the trainer run needs, imported from ``tree`` (and the shared ``envs``)."""
    for name in list(sys.modules):
        if name.startswith(("ppo_lstm", "loop_floor")):
            del sys.modules[name]
    sys.path[:0] = [tree, os.path.join(tree, "bench")]
    try:
        import loop_floor
        from ppo_lstm.distributed import LocalComm, Worker
        from ppo_lstm.train.shutdown import StopRequest
        from ppo_lstm.train.trainer import Trainer
        assert loop_floor.__file__.startswith(tree) and Trainer.__module__ == "ppo_lstm.train.trainer"
        assert sys.modules["ppo_lstm"].__file__.startswith(tree), sys.modules["ppo_lstm"].__file__
        return {"lf": loop_floor, "Trainer": Trainer, "LocalComm": LocalComm, "Worker": Worker, "Stop": StopRequest}
    finally:
        del sys.path[:2]


def run(v: dict[str, Any], steps_per_env: int, env_steps: int, tmp: str) -> tuple[list[float], Any]:
    """One trainer run: its rollout phases' seconds and its final (weights, Adam state)."""
    config = v["lf"].train_config(steps_per_env, env_steps, tmp)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        trainer = v["Trainer"](config, v["Worker"](v["LocalComm"](), 0, torch.device("cpu")), None, v["Stop"]())
        trainer.clock = clock = v["lf"].IntervalClock()
        trainer.run()
    return clock.intervals["rollout"], (trainer.agent.state_dict(), trainer.optimizer.state_dict()["state"])


def collector(v: dict[str, Any], steps_per_env: int, tmp: str) -> Any:
    """The rollout collector of a trainer of version ``v``, built but not run."""
    config = v["lf"].train_config(steps_per_env, 8 * steps_per_env * 64, tmp)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        trainer = v["Trainer"](config, v["Worker"](v["LocalComm"](), 0, torch.device("cpu")), None, v["Stop"]())
    return trainer.rollout


def windows(versions: dict[str, dict[str, Any]], steps_per_env: int, count: int, tmp: str) -> dict[str, Any]:
    """Quickest seconds of ``finish`` and of ``collect`` + ``finish``, per version, alternating."""
    collectors = {v: collector(c, steps_per_env, tmp) for v, c in versions.items()}
    best = {(v, k): float("inf") for v in versions for k in ("finish", "rollout")}
    for update in range(count):
        for v, rollout in collectors.items():
            tic = time.perf_counter()
            rollout.collect(update)
            rollout.finish()
            end = time.perf_counter()
            best[v, "rollout"] = min(best[v, "rollout"], end - tic)
            tic = time.perf_counter()
            rollout.finish()
            best[v, "finish"] = min(best[v, "finish"], time.perf_counter() - tic)
    return best


def equal(a: Any, b: Any) -> bool:
    (ma, oa), (mb, ob) = a, b
    return all(torch.equal(ma[k], mb[k]) for k in ma) and \
        all(torch.equal(oa[i][k], ob[i][k]) for i in oa for k in oa[i])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="a checkout of the code to compare with (git archive COMMIT | tar -x -C DIR)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2048, help="env steps per trainer run")
    parser.add_argument("--windows", type=int, default=300, help="alternating rollouts (and finish calls) timed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    versions = {"before": load(os.path.abspath(args.before)), "after": load(HERE)}
    configs = {"defaults": 16, "matched": 128}
    phases = {(c, v): [] for c in configs for v in versions}
    bitwise = True
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, steps in configs.items():
                finals = []
                for version, classes in versions.items():
                    seconds, final = run(classes, steps, args.steps, tmp)
                    phases[name, version].append(seconds)
                    finals.append(final)
                bitwise &= equal(*finals)
        short = {name: windows(versions, steps, args.windows, tmp) for name, steps in configs.items()}
    summary: dict[str, Any] = {}
    for name, steps in configs.items():
        n = steps * 8
        best = {v: min(min(r) for r in phases[name, v]) / n for v in versions}
        mean = {v: sum(map(sum, phases[name, v])) / sum(map(len, phases[name, v])) / n for v in versions}
        print(f"{name} (batch {n}) rollout phase per env step: quickest before {1e6 * best['before']:.1f} us, "
              f"after {1e6 * best['after']:.1f} us ({best['before'] / best['after']:.2f}x); mean before "
              f"{1e6 * mean['before']:.1f} us, after {1e6 * mean['after']:.1f} us ({mean['before'] / mean['after']:.2f}x)")
        summary[name] = {"batch": n, "phase_quickest_per_env_step_s": best, "phase_mean_per_env_step_s": mean}
    for name, steps in configs.items():
        b = short[name]
        print(f"{name} (batch {steps * 8}): finish() before {1e6 * b['before', 'finish']:.0f} us, after "
              f"{1e6 * b['after', 'finish']:.0f} us ({b['before', 'finish'] / b['after', 'finish']:.2f}x); rollout "
              f"(collect + finish) per env step before {1e6 * b['before', 'rollout'] / (steps * 8):.1f} us, after "
              f"{1e6 * b['after', 'rollout'] / (steps * 8):.1f} us ({b['before', 'rollout'] / b['after', 'rollout']:.2f}x)")
        summary[name].update({"finish_quickest_s": {v: b[v, "finish"] for v in versions},
                              "rollout_quickest_per_env_step_s": {v: b[v, "rollout"] / (steps * 8) for v in versions}})
    print(f"quickest of {args.windows} alternating windows each")
    print(f"{args.rounds} interleaved rounds of {args.steps} env steps per run, one thread; final weights and "
          f"Adam state bitwise equal in every round: {bitwise}")
    print(json.dumps({"bench": "rollout_phase_before_after", "before": os.path.abspath(args.before), "threads": 1,
                      "rounds": args.rounds, "steps": args.steps, "windows": args.windows, "bitwise_equal": bitwise,
                      "results": summary}))


if __name__ == "__main__":
    main()
