"""Time to quality: wall seconds and env steps to reach shares of the Bayes filter, beside RecurrentPPO.

Trains ppo-lstm-trader (its defaults, in-process, the CLI's loop) and sb3-contrib's
RecurrentPPO (8 envs x 16 steps, 4 epochs x 4 minibatches, MLP 64x64, one shared LSTM of
64: the sizes of ``bench/learning.py``) on the regime market at 10 bps, ``--seeds`` seeds
each, one torch thread each. Every ``--every`` env steps (and at step 0) each run's
policy is scored GREEDILY on the same ``--episodes`` held-out episodes
(``evaluation_seeds(0, episodes)``, disjoint from every training seed), as
``bench/learning.py`` scores it: mean net log return per bar in bps, as a share of the
Bayes filter's on the same paths (threshold tuned on training paths). Evaluation time is
NOT counted: each point's wall time is the run's training time so far, evaluations
subtracted; building the trainer is not counted either.

Reports, per trainer, the env steps and wall seconds to first reach 50 %, 80 % and 90 %
of the Bayes filter (median and worst over seeds; "not reached" where a seed never gets
there within its budget), and the time each needs to reach RecurrentPPO's best score
(the median over its seeds of each seed's best point) with their ratio. Writes a plot of
every curve against wall time and env steps.

    python bench/time_to_quality.py                # 3 seeds each, the full measurement
    python bench/time_to_quality.py --quick        # smoke run: 1 seed, 4,096 steps each
    python bench/time_to_quality.py --set env.ema_spans=none --plot plain.png   # both without the EMA entry
    python bench/time_to_quality.py --sb3-set env.ema_spans=none     # RecurrentPPO alone without it
    python bench/time_to_quality.py --workers 1,2 --no-sb3 --jobs 1  # 1 against 2 gloo workers

With ``--workers 1,2`` ppo-lstm-trader trains once per worker count; W > 1 runs W gloo CPU
workers through the trainer's launcher (rank 0 scores, the others wait at the next collective
meanwhile), one such run at a time, after the pool's runs. Runs ``--jobs`` training processes at once; compare ratios, not absolute seconds (a
shared machine). Prints a table, then ONE JSON line.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.job_pool import job_pool  # noqa: E402
from bench.learning_ceiling import baselines  # noqa: E402
from bench.learning_jobs import _parse_value, apply_overrides, make_sb3, sb3_greedy  # noqa: E402
from bench.learning_markets import EVAL_SEED, TUNE_EPISODES, env_config  # noqa: E402
from bench.learning_paths import score_backtest, simulated_paths  # noqa: E402
from bench.quality_curve import Point, best_score, first_reach, reach_summary  # noqa: E402
from ppo_lstm.algo.seeding import env_seeds  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_simulated, evaluation_seeds  # noqa: E402

MARKET = "regime-10bps"
SHARES = (0.5, 0.8, 0.9)
OURS, SB3 = "ppo-lstm-trader", "RecurrentPPO"


class Probe:
    """Scores a policy every ``every`` env steps; keeps the curve with evaluation time left out."""

    def __init__(self, every: int, score: Callable[[Any], float]) -> None:
        self.every, self.score = every, score
        self.points: list[Point] = []
        self.eval_s, self.start, self.next = 0.0, 0.0, 0

    def begin(self) -> None:
        self.start = time.perf_counter()

    def maybe(self, env_steps: int, policy: Any) -> None:
        """Score ``policy`` if ``env_steps`` has reached the next multiple of ``every``."""
        if env_steps < self.next:
            return
        pause = time.perf_counter()
        value = self.score(policy)
        self.points.append((int(env_steps), pause - self.start - self.eval_s, value))
        self.eval_s += time.perf_counter() - pause
        self.next = (env_steps // self.every + 1) * self.every


def curve_ours(seed: int, steps: int, every: int, episodes: int,
               overrides: Optional[dict[str, Any]] = None, workers: int = 1) -> list[Point]:
    """ppo-lstm-trader's defaults (with ``--set``'s ``overrides``), scored after every update that crosses a
    multiple of ``every``, on the market it trains on; on ``workers`` gloo CPU workers, rank 0 scoring."""
    torch.set_num_threads(1)
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.distributed import LocalComm, Worker, launch
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer

    env, rest = apply_overrides(env_config(MARKET), overrides or {})
    probe = Probe(every, lambda agent: score_backtest(backtest_simulated(agent, env, episodes, EVAL_SEED))[
        "bps_per_bar"])

    class CurveTrainer(Trainer):
        def _log_episodes(self, records):  # once per update, after it
            totals = super()._log_episodes(records)
            if self.rank == 0:
                probe.maybe(self.state.env_steps, self.agent)
            return totals

    def train(config: TrainConfig, worker: Worker) -> int:
        trainer = CurveTrainer(config, worker, None, StopRequest())
        if worker.comm.rank != 0:
            return trainer.run()
        probe.begin()
        probe.maybe(0, trainer.agent)
        code = trainer.run()
        if probe.points[-1][0] != trainer.state.env_steps:
            probe.next = 0
            probe.maybe(trainer.state.env_steps, trainer.agent)
        if workers > 1:
            torch.save(probe.points, os.path.join(config.checkpoint_dir, "curve.pt"))
        return code

    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        config = TrainConfig(episodes=max(8, steps // env.episode_length), seed=seed, progress=False,
                             log_file=os.path.join(tmp, "log"), checkpoint_dir=tmp, checkpoint_interval=10**9,
                             log_interval=10**9, env=env, **rest)
        if workers == 1:
            train(config, Worker(LocalComm(), 0, torch.device("cpu")))
            return probe.points
        config = dataclasses.replace(config, distributed=True, num_workers=workers, device="cpu")
        if launch(config, "cpu", train) != 0:
            raise SystemExit(f"the {workers}-worker run of seed {seed} failed")
        return torch.load(os.path.join(tmp, "curve.pt"), weights_only=True)


def curve_sb3(seed: int, steps: int, every: int, episodes: int,
              overrides: Optional[dict[str, Any]] = None) -> list[Point]:
    """RecurrentPPO on the env of ``--set``'s ``env.NAME`` overrides (the others are ppo-lstm-trader's),
    scored at the start of every rollout that follows a multiple of ``every``."""
    torch.set_num_threads(1)
    from stable_baselines3.common.callbacks import BaseCallback

    env, _ = apply_overrides(env_config(MARKET), overrides or {})
    paths = simulated_paths(env, evaluation_seeds(EVAL_SEED, episodes))
    probe = Probe(every, lambda model: sb3_greedy(model, paths)["bps_per_bar"])

    class Every(BaseCallback):
        def _on_rollout_start(self) -> None:  # after the previous rollout's training
            probe.maybe(self.model.num_timesteps, self.model)

        def _on_step(self) -> bool:
            return True

    model = make_sb3(env, None, seed)
    probe.begin()
    model.learn(total_timesteps=steps, callback=Every())
    if probe.points[-1][0] != model.num_timesteps:
        probe.next = 0
        probe.maybe(model.num_timesteps, model)
    return probe.points


def run(job: dict[str, Any]) -> dict[str, Any]:
    """One training run's curve (in a child process, whose console output is dropped)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the trainer's console lines
    if job["trainer"] != SB3:
        curve = curve_ours(job["seed"], job["steps"], job["every"], job["episodes"], job["overrides"],
                           job.get("workers", 1))
    else:
        curve = curve_sb3(job["seed"], job["steps"], job["every"], job["episodes"], job["overrides"])
    return {**job, "curve": curve}


def run_here(job: dict[str, Any]) -> dict[str, Any]:
    """A run of several workers, launched from this process (its workers are forked from it)."""
    return {**job, "curve": curve_ours(job["seed"], job["steps"], job["every"], job["episodes"], job["overrides"],
                                       job["workers"])}


def _cell(x: Optional[float], spec: str) -> str:
    return format(x, spec) if x is not None else "not reached"


def print_table(report: dict[str, Any]) -> None:
    ref = report["bayes_bps"]
    print(f"regime market, 10 bps; Bayes filter {ref:.3f} bps/bar on {report['episodes']} held-out episodes; "
          f"scored every {report['every']} env steps; wall time excludes evaluation")
    print(f"{'target':<40}{'trainer':<30}{'reached':>8}{'steps median':>14}{'steps worst':>14}"
          f"{'wall s median':>15}{'wall s worst':>14}")
    for row in report["targets"]:
        for trainer in report["trainers"]:
            r = row[trainer]
            budget = report["budgets"][trainer]
            print(f"{row['label']:<40}{trainer:<30}{r['reached']:>6}/{r['runs']}"
                  f"{_cell(r['steps_median'], ',.0f'):>14}{_cell(r['steps_worst'], ',.0f'):>14}"
                  f"{_cell(r['wall_median'], '.1f'):>15}{_cell(r['wall_worst'], '.1f'):>14}"
                  + (f"   (budget {budget:,} steps)" if r["reached"] < r["runs"] else ""))
    ratio = report["speedup_to_sb3_best"]
    if SB3 in report["trainers"]:
        print(f"wall time to RecurrentPPO's best score: RecurrentPPO / ppo-lstm-trader = "
              f"{'-' if ratio is None else format(ratio, '.1f') + 'x'} (median seeds)")
    for label, value in report.get("worker_ratios", {}).items():
        print(f"{label}: {'-' if value is None else format(value, '.2f') + 'x'}")


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = report["bayes_bps"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colors = ("tab:blue", "tab:green", "tab:red", "tab:purple")
    for trainer, color in ((t, "tab:orange" if t == SB3 else colors[i % 4]) for i, t in enumerate(report["trainers"])):
        for i, curve in enumerate(report["curves"][trainer]):
            steps, wall, score = zip(*curve)
            share = [100.0 * s / ref for s in score]
            label = trainer if i == 0 else None
            axes[0].plot(wall, share, color=color, alpha=0.8, label=label)
            axes[1].plot(steps, share, color=color, alpha=0.8, label=label)
    for ax, xlabel in zip(axes, ("training wall seconds (evaluation excluded)", "env steps")):
        for share in SHARES:
            ax.axhline(100 * share, color="grey", lw=0.6, ls=":")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out score, % of the Bayes filter")
    axes[0].set_ylim(-100, 110)
    axes[0].legend(loc="lower right")
    fig.suptitle(f"Time to quality, regime market at 10 bps ({report['seeds']} seeds each, one thread a worker)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per trainer (1..N)")
    parser.add_argument("--steps", type=int, default=131_072, help="env steps per ppo-lstm-trader run")
    parser.add_argument("--sb3-steps", type=int, default=196_608, help="env steps per RecurrentPPO run")
    parser.add_argument("--every", type=int, default=8192, help="env steps between evaluations")
    parser.add_argument("--episodes", type=int, default=500, help="held-out episodes per evaluation")
    parser.add_argument("--jobs", type=int, default=2, help="training processes at once (1 torch thread each)")
    parser.add_argument("--plot", type=Path, default=Path("time_to_quality.png"),
                        help="the plot's path (default: time_to_quality.png in the current directory)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="TrainConfig override for ppo-lstm-trader (env fields as env.NAME, which "
                             "RecurrentPPO's env takes too), repeatable")
    parser.add_argument("--sb3-set", action="append", default=[], metavar="env.FIELD=VALUE",
                        help="an env override for RecurrentPPO alone, over --set's env ones, repeatable "
                             "(e.g. env.ema_spans=none: RecurrentPPO without the EMA entry)")
    parser.add_argument("--workers", default="1", help="ppo-lstm-trader's worker counts, comma-separated (gloo CPU "
                                                       "workers; runs of more than one train one at a time)")
    parser.add_argument("--no-sb3", action="store_true", help="skip RecurrentPPO")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 4096 steps each, 100 episodes")
    parser.add_argument("--json-out", type=Path, help="also write the JSON line here")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.sb3_steps, args.every, args.episodes = 1, 4096, 4096, 1024, 100
    torch.set_num_threads(1)
    start = time.perf_counter()
    overrides = {k: _parse_value(v) for k, v in (item.split("=", 1) for item in args.set)}
    sb3_overrides = {k: v for k, v in overrides.items() if k.startswith("env.")}  # the same observation ...
    sb3_overrides.update((k, _parse_value(v)) for k, v in (item.split("=", 1) for item in args.sb3_set))
    if any(not k.startswith("env.") for k in sb3_overrides):
        parser.error("--sb3-set takes env.FIELD=VALUE (RecurrentPPO's env), e.g. env.ema_spans=none")
    counts = [int(w) for w in args.workers.split(",")]
    ours = {w: OURS if counts == [1] else f"{OURS}, {w} worker{'s' if w > 1 else ''}" for w in counts}
    trainers = [*ours.values(), *([] if args.no_sb3 else [SB3])]
    jobs = [{"trainer": trainer, "seed": seed, "steps": steps, "every": args.every, "episodes": args.episodes,
             "overrides": overrides if trainer != SB3 else sb3_overrides,  # ... unless --sb3-set says otherwise
             "workers": workers}
            for seed in range(1, args.seeds + 1)
            for trainer, steps, workers in ([] if args.no_sb3 else [(SB3, args.sb3_steps, 1)])
            + [(ours[w], args.steps, w) for w in counts]]
    def reference() -> float:
        env = env_config(MARKET)
        test = simulated_paths(env, evaluation_seeds(EVAL_SEED, args.episodes))
        tune = simulated_paths(env, env_seeds(1, 0, 8), TUNE_EPISODES)
        return baselines(MARKET, test, tune)["Bayes filter"]["bps_per_bar"]

    # With several worker counts the reference comes first, so no run trains beside it and their seconds compare.
    ref = reference() if len(counts) > 1 else None
    with job_pool(args.jobs) as pool:
        futures = [pool.submit(run, job) for job in jobs if job["workers"] == 1]
        if ref is None:
            ref = reference()  # while the runs train
        done = [f.result() for f in futures]
    done += [run_here(job) for job in jobs if job["workers"] > 1]  # each on every core, one at a time
    curves = {t: [d["curve"] for d in sorted(done, key=lambda d: d["seed"]) if d["trainer"] == t] for t in trainers}
    targets = [{"label": f"{100 * s:.0f} % of the Bayes filter ({s * ref:.2f} bps)", "target": s * ref,
                **{t: reach_summary(curves[t], s * ref) for t in trainers}} for s in SHARES]
    ratio, sb3_best = None, None
    if not args.no_sb3:
        sb3_best = best_score(curves[SB3])
        to_best = {t: reach_summary(curves[t], sb3_best) for t in trainers}
        targets.append({"label": f"RecurrentPPO's best ({sb3_best:.2f} bps, {100 * sb3_best / ref:.0f} %)",
                        "target": sb3_best, **to_best})
        ours_wall, sb3_wall = to_best[ours[counts[0]]]["wall_median"], to_best[SB3]["wall_median"]
        ratio = sb3_wall / ours_wall if ours_wall and sb3_wall else None
    worker_ratios = {}
    for w in counts[1:]:  # wall time to 90 % on w workers over the first count's (medians)
        mine, base = targets[-1 if args.no_sb3 else -2][ours[w]], targets[-1 if args.no_sb3 else -2][ours[counts[0]]]
        worker_ratios[f"wall time to 90 % of the Bayes filter, {w} workers / {counts[0]} (medians)"] = (
            mine["wall_median"] / base["wall_median"] if mine["wall_median"] and base["wall_median"] else None)
    report = {"bench": "time_to_quality", "market": MARKET, "seeds": args.seeds, "every": args.every,
              "episodes": args.episodes, "budgets": {t: args.sb3_steps if t == SB3 else args.steps for t in trainers},
              "bayes_bps": ref, "trainers": trainers, "workers": counts, "worker_ratios": worker_ratios,
              "targets": targets, "sb3_best_bps": sb3_best,
              "speedup_to_sb3_best": ratio, "sb3_best_time_ratio": ratio,  # one figure under both names
              "first_reach_sb3_best": ({t: [first_reach(c, sb3_best) for c in curves[t]] for t in trainers}
                                       if sb3_best is not None else None),
              "curves": curves, "quick": args.quick, "overrides": overrides, "sb3_overrides": sb3_overrides}
    report["wall_s"] = time.perf_counter() - start
    print_table(report)
    if args.plot:
        plot(report, args.plot)
        print(f"plot: {args.plot}")
    line = json.dumps(report)
    print(line)
    if args.json_out:
        args.json_out.write_text(line + "\n")


if __name__ == "__main__":
    main()
